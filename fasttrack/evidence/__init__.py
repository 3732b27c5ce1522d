"""Evidence: collection on GPUs, binding to code by digest, signing, and verification rules."""
