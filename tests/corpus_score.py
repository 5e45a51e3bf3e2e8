"""Score ``loki.text.errorscan.scan`` on the labelled corpus in tests/corpus/ (see its README.md).

Used by ``tests/text/test_errorscan.py::test_corpus_targets`` and runnable on its own to see the misses:

    .venv/bin/python tests/corpus_score.py            # figures, and the misses of the tune split
    .venv/bin/python tests/corpus_score.py --heldout  # also the misses of the held-out split

Figures (docs/error-patterns.md, "Corpus"):

* detection with the exit code: precision and recall of ``scan(output, exit_code, command=command)``
  against ``expected_error``, on every case;
* detection without an exit code: ``scan(output)`` against ``expected_text_error`` (what the same text
  means when a tool without an exit status returns it), on the cases that carry that label and have one;
* class accuracy: among the failures with an ``expected_class``, how many get exactly that class;
* primary location recall: among the ``primary_refs`` (``file:line``, ``a|b`` accepts either), how many
  are among the first ``REF_DEPTH`` ``file_refs``; and how often the *first* ref is a primary one (what
  the strike message and the memory hint name).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loki.text.errorscan import FileRef, scan

CORPUS = Path(__file__).parent / "corpus"
REF_DEPTH = 5


def load() -> list[tuple[str, dict[str, object]]]:
    return [(path.stem, json.loads(path.read_text(encoding="utf-8"))) for path in sorted(CORPUS.glob("*.json"))]


def split_of(case: dict[str, object]) -> str:
    return str(case.get("split", "tune"))


def _norm_path(path: str) -> str:
    if path.startswith("file://"):
        path = path[len("file://"):]
    while path.startswith("./"):
        path = path[2:]
    return path


def ref_matches(expected: str, ref: FileRef) -> bool:
    """``expected`` (``path:line``) names ``ref``: same line, and one path is a suffix of the other."""
    path, _, line = expected.rpartition(":")
    if not line.isdigit() or int(line) != ref.line:
        return False
    a, b = _norm_path(path), _norm_path(ref.file)
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def _alternatives(expected: str) -> list[str]:
    return expected.split("|")


def score(cases: list[tuple[str, dict[str, object]]]) -> dict[str, object]:
    tp = fp = fn = 0
    ttp = tfp = tfn = 0
    class_total = class_right = 0
    refs_total = refs_found = 0
    first_total = first_right = 0
    misses: list[str] = []
    for name, case in cases:
        output, code, command = str(case["output"]), int(str(case["exit_code"])), str(case["command"])
        expected = bool(case["expected_error"])
        result = scan(output, code, command=command)
        got = result.is_error
        tp += expected and got
        fp += (not expected) and got
        fn += expected and not got
        if expected != got:
            misses.append(f"{name}: verdict with exit code: expected {expected}, got {got} ({result.pattern})")
        text_label = case.get("expected_text_error")
        if text_label is not None:
            text_got = scan(output).is_error
            ttp += bool(text_label) and text_got
            tfp += (not text_label) and text_got
            tfn += bool(text_label) and not text_got
            if bool(text_label) != text_got:
                misses.append(f"{name}: verdict without exit code: expected {text_label}, got {text_got} "
                              f"({scan(output).pattern})")
        expected_class = case.get("expected_class")
        if expected and expected_class:
            class_total += 1
            if got and result.error_class == expected_class:
                class_right += 1
            else:
                misses.append(f"{name}: class: expected {expected_class}, got {result.error_class} ({result.pattern})")
        primary = case.get("primary_refs")
        if expected and isinstance(primary, list) and primary:
            refs = result.file_refs[:REF_DEPTH]
            for wanted in primary:
                refs_total += 1
                if any(ref_matches(alt, ref) for alt in _alternatives(str(wanted)) for ref in refs):
                    refs_found += 1
                else:
                    shown = ", ".join(f"{r.file}:{r.line}" for r in refs) or "none"
                    misses.append(f"{name}: location {wanted} not among the first refs: {shown}")
            first_total += 1
            if result.file_refs and any(
                ref_matches(alt, result.file_refs[0]) for wanted in primary for alt in _alternatives(str(wanted))
            ):
                first_right += 1
            else:
                first = f"{result.file_refs[0].file}:{result.file_refs[0].line}" if result.file_refs else "none"
                misses.append(f"{name}: first ref {first} is not a primary location {primary}")

    def ratio(a: int, b: int) -> float:
        return a / b if b else 1.0

    return {
        "n": len(cases),
        "precision": ratio(tp, tp + fp), "recall": ratio(tp, tp + fn),
        "text_n": ttp + tfp + tfn + sum(
            1 for _, c in cases if c.get("expected_text_error") is False and not scan(str(c["output"])).is_error
        ),
        "text_precision": ratio(ttp, ttp + tfp), "text_recall": ratio(ttp, ttp + tfn),
        "class_accuracy": ratio(class_right, class_total), "class_n": class_total,
        "ref_recall": ratio(refs_found, refs_total), "ref_n": refs_total,
        "first_ref": ratio(first_right, first_total), "first_n": first_total,
        "misses": misses,
    }


def line(label: str, figures: dict[str, object]) -> str:
    return (f"{label} (n={figures['n']}): with exit code P={figures['precision']:.3f} R={figures['recall']:.3f}; "
            f"without exit code (n={figures['text_n']}) P={figures['text_precision']:.3f} "
            f"R={figures['text_recall']:.3f}; class accuracy {figures['class_accuracy']:.3f} "
            f"(n={figures['class_n']}); primary file:line recall {figures['ref_recall']:.3f} "
            f"(n={figures['ref_n']}), first ref primary {figures['first_ref']:.3f} (n={figures['first_n']})")


def main(argv: list[str]) -> int:
    cases = load()
    splits = {"whole": cases,
              "tune": [c for c in cases if split_of(c[1]) == "tune"],
              "heldout": [c for c in cases if split_of(c[1]) == "heldout"]}
    for label, subset in splits.items():
        figures = score(subset)
        print(line(label, figures))
        if label == "tune" or (label == "heldout" and "--heldout" in argv):
            for miss in figures["misses"]:  # type: ignore[union-attr]
                print("   ", miss)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
