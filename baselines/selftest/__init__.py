"""A small engine-side baseline for fasttrack's own tests and the GPU self-check: ``relu(x @ W + b)``.

It plays the part `baselines/vllm/<model>/` plays for a real model: the stock path, the fp32/fp64 oracle, the
weights, the inputs and the byte count all come from here, and a toy contribution supplies only candidates
(`candidates(baseline, point)`) built on `state`. At tp = n > 1 (one process per rank, the default process
group initialised) the layer is row-parallel: each rank holds 1/n of W's rows and all-reduces its partial.
"""
