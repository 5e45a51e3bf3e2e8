"""An agent that emits signals as fast as it can, each carrying (worker, seq) so the test can
check that every one was applied exactly once.

usage: python -m tests.procs.emit_worker ROOT WORKER COUNT
Types cycle through a shared fixed name (DOCS_NEEDED: many unconsumed copies at once), a
subject type, a custom type and HUMAN_REVIEW_NEEDED without a task.
"""

from __future__ import annotations

import sys

from loki.signals import emit as signals
from loki.storage.store import Store

KINDS = (("DOCS_NEEDED", None), ("FEATURE_READY", "shared"), ("CUSTOM_EVENT", None), ("HUMAN_REVIEW_NEEDED", None))


def main() -> None:
    root, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = Store(root, validate_all=False)
    for seq in range(count):
        signal_type, subject = KINDS[seq % len(KINDS)]
        fields = {"worker": worker, "seq": seq}
        if signal_type == "HUMAN_REVIEW_NEEDED":
            fields["reason"] = "ambiguous requirements"
        signals.emit(store, signal_type, fields, subject=subject)
    sys.stdout.write("done\n")


if __name__ == "__main__":
    main()
