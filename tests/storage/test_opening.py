"""What a tree's config says about where its state is, read in one place (loki/storage/backendof.py,
``storage_section``) by the opener and by the check every guarded write makes (loki/storage/moving.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loki.errors import ExitCode, LokiError
from loki.storage.backendof import storage_section
from loki.storage.moving import backend_of
from loki.storage.opening import database_url, open_store
from tests.helpers import cli


def _config(root: Path, doc: object) -> None:
    (root / "config" / "loki.json").write_text(json.dumps(doc))


def test_a_tree_names_postgresql_only_with_a_storage_object_that_says_so(root: Path) -> None:
    assert (storage_section(str(root)), database_url(str(root)), backend_of(str(root))) == (None, None, "files")
    for doc in ([], {"storage": "postgresql"}, {"storage": {"backend": "files"}}):
        _config(root, doc)
        assert (storage_section(str(root)), backend_of(str(root))) == (None, "files"), doc
    (root / "config" / "loki.json").write_text("{broken")
    assert (storage_section(str(root)), backend_of(str(root))) == (None, "files")
    storage = {"backend": "postgresql", "database": "postgresql://loki@db.example/loki"}
    _config(root, {"storage": storage})
    assert (storage_section(str(root)), backend_of(str(root))) == (storage, "postgresql")
    assert database_url(str(root)) == "postgresql://loki@db.example/loki"


def test_a_database_tree_without_a_database_is_refused_naming_the_field(root: Path, project: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOKI_DATABASE_URL", raising=False)
    _config(root, {"storage": {"backend": "postgresql"}})
    with pytest.raises(LokiError, match=r"storage\.backend is postgresql but no database is named") as caught:
        open_store(str(root))
    assert str(root / "config" / "loki.json") in caught.value.message
    listed = cli(["queue", "list"], root=project)
    assert listed.code == caught.value.exit_code != ExitCode.OK
    assert "no database is named: set /storage/database or LOKI_DATABASE_URL" in listed.stderr
