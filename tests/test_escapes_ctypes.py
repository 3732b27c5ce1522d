"""ctypes in shipping model code (issue 15): raw memory is out of the trace's sight (a write through a
pointer's index raises no audit event), so the static scan is the barrier. Pointers, casts and
`from_address` (but read into a new value at once) are FT146 errors; plain ctypes values, their sizes and
addresses stay clean."""

from __future__ import annotations

import pytest

from fasttrack.confinement.escapes import find_escapes
from tests.escape_marks import error_lines

ATTACKS: dict[str, str] = {
    "pointer-index": "import ctypes\nc = ctypes.c_char(b'a')\np = ctypes.pointer(c)  # <-\np[40] = b'?'\n",
    "cast-index": "import ctypes\nctypes.cast(id('x') + 40, ctypes.POINTER(ctypes.c_char))[0] = b'y'  # <-\n",
    "bound-array-from-address": "import ctypes\nv = (ctypes.c_ubyte * 128).from_address(id(3))  # <-\n"
                                "v[0] = 1\n",
    "passed-on-from-address": "import ctypes\nfill = print\n"
                              "fill((ctypes.c_ubyte * 8).from_address(9))  # <-\n",
    "scalar-from-address": "import ctypes\nctypes.c_int.from_address(id(7) + 24).value = 8  # <-\n",
    "array-from-address": "import ctypes\nb = (ctypes.c_char * 4).from_address(id('abcd') + 40)  # <-\n"
                          "b[0] = b'z'\n",
    "own-structure-from-address": "import ctypes\nclass S(ctypes.Structure):\n"
                                  "    _fields_ = [('a', ctypes.c_long)]\n"
                                  "S.from_address(id(None)).a = 0  # <-\n",
    "getattr-from-address": "import ctypes\nf = getattr(ctypes.c_int, 'from_address')  # <-\n"
                            "f(8).value = 1\n",
    "aliased-pointer": "from ctypes import pointer as ptr, c_int\nq = ptr(c_int(2))  # <-\nq[9] = 3\n",
}
HONEST: dict[str, str] = {
    # vLLM's own K3 launch code: an argument array of addresses of its own ctypes values (ints)
    "launch-arguments": "import ctypes\nclass L:\n    def __init__(self, p):\n"
                        "        self.pointer = ctypes.c_void_p(p)\n"
                        "        self.arguments = (ctypes.c_void_p * 1)(ctypes.addressof(self.pointer))\n",
    # ... and a TMA descriptor's bytes copied out of the address the driver gives, right where it is read
    "descriptor-copied-out": "import ctypes\ndef encode(tensor_map):\n    encoded = b''\n"
                             "    encoded += (ctypes.c_ubyte * 128).from_address(tensor_map.getPtr())\n"
                             "    return bytes((ctypes.c_ubyte * 4).from_address(tensor_map.getPtr()))\n",
    "values-and-sizes": "import ctypes\nx = ctypes.c_int(3)\nn = ctypes.sizeof(x) + ctypes.alignment(x)\n"
                        "s = ctypes.c_char_p(b'k')\n",
    "own-structure": "import ctypes\nclass S(ctypes.Structure):\n    _fields_ = [('a', ctypes.c_int)]\n"
                     "s = S(1)\ns.a = 2\n",
}


def _scan(src: str) -> list[int]:
    found = find_escapes(src, "vllm/models/kimi_k3/evil.py", {"vllm.models.kimi_k3"},
                         own_op_namespaces={"kimi_k3"})
    return error_lines(found)


@pytest.mark.parametrize("key", sorted(ATTACKS))
def test_native_memory_is_an_error_at_its_line(key: str) -> None:
    src = ATTACKS[key]
    marked = [i for i, line in enumerate(src.splitlines(), 1) if line.endswith("# <-")]
    assert marked and set(marked) <= set(_scan(src)), (key, _scan(src))


@pytest.mark.parametrize("key", sorted(HONEST))
def test_plain_ctypes_values_stay_clean(key: str) -> None:
    assert _scan(HONEST[key]) == []
