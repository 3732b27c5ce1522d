"""esc21: a call through a loop variable runs every own function the loop may bind (`for cb in (safe,
patcher): cb(Engine)`), also through a named list of callbacks or one filled by `.append`; and at module
level, where statement order is not followed, a call in the body of `for cb in READ` sees only that
loop's bindings (an honest file looping over two callback lists, one called with the contribution's own
objects and one with an engine object, was an error). Attacks are errors at the lines marked `# <-`; the
honest twins stay clean."""

from __future__ import annotations

import pytest

from tests.escape_marks import error_lines
from tests.test_escapes_hostile20 import marked, scan

CBS = "def patch(c):\n    c.forward = None\ndef show(c):\n    print(c)\n"
ATTACKS: list[tuple[str, str]] = [
    ("two-literal-loops-second-holds-the-patcher",
     CBS + "for cb in (show,):\n    cb(K())\nfor cb in (show, patch):\n    cb(L)  # <-\n"),
    ("one-literal-loop-patcher-second", CBS + "for cb in [show, patch]:\n    cb(L)  # <-\n"),
    ("in-a-function", CBS + "def f():\n    for cb in (show, patch):\n        cb(L)  # <-\n"),
    ("named-lists", CBS + "SAFE = [patch]\nREAD = [show, patch]\nfor cb in SAFE:\n    cb(K())\n"
     "for cb in READ:\n    cb(L)  # <-\n"),
    ("list-filled-by-append", CBS + "CBS = []\nCBS.append(show)\nCBS.append(patch)\nfor cb in CBS:\n"
     "    cb(L)  # <-\n"),
    ("tuple-of-a-named-list", CBS + "READ = [show, patch]\nfor cb in tuple(READ):\n    cb(L)  # <-\n"),
    ("rebound-inside-the-body", CBS + "for cb in (show,):\n    cb = patch\n    cb(L)  # <-\n"),
    ("rebound-by-a-nested-global", CBS + "for cb in (show,):\n    def swap():\n        global cb\n"
     "        cb = patch\n    swap()\n    cb(L)  # <-\n"),
    ("walrus-in-the-body", CBS + "for cb in (show,):\n    (cb := patch)\n    cb(L)  # <-\n"),
    ("called-after-the-loop", CBS + "for cb in (show,):\n    pass\nfor cb in (patch,):\n    pass\n"
     "cb(L)  # <-\n"),
]
HONEST: list[tuple[str, str]] = [
    ("two-literal-loops", CBS + "for cb in (patch,):\n    cb(K())\nfor cb in (show,):\n    cb(L)\n"),
    ("two-named-lists", CBS + "SAFE = [patch]\nREAD = [show]\nfor cb in SAFE:\n    cb(K())\n"
     "for cb in READ:\n    cb(L)\n"),
    ("two-appended-lists", CBS + "SAFE = []\nSAFE.append(patch)\nREAD = []\nREAD.append(show)\n"
     "for cb in SAFE:\n    cb(K())\nfor cb in READ:\n    cb(L)\n"),
    ("in-a-function", CBS + "def f():\n    for cb in (patch,):\n        cb(K())\n    for cb in (show,):\n"
     "        cb(L)\n"),
]


@pytest.mark.parametrize("src", [a[1] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_loop_over_callbacks_attack_is_an_error(src: str) -> None:
    want = marked(src)
    assert want, "an attack marks its lines"
    assert set(want) <= set(error_lines(scan(src)))


@pytest.mark.parametrize("src", [a[1] for a in HONEST], ids=[a[0] for a in HONEST])
def test_loop_over_callbacks_honest_twin_is_clean(src: str) -> None:
    assert error_lines(scan(src)) == []
