"""The schemas are valid draft 2020-12, and loki's compiled validator agrees with jsonschema."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from referencing import Registry as RefRegistry
from referencing import Resource

from loki.storage.schema import BASE_URI, Registry, registry, schema_dir
from tests.helpers import task

ALL = registry().all_raw()
REF_REGISTRY = RefRegistry().with_resources([(uri, Resource.from_contents(doc)) for uri, doc in ALL.items()])


def reference_ok(name: str, doc: Any) -> bool:
    validator = Draft202012Validator(registry().raw(name), registry=REF_REGISTRY)
    return validator.is_valid(doc)


@pytest.mark.parametrize("uri", sorted(ALL))
def test_every_schema_is_valid_draft_2020_12_with_an_id(uri: str) -> None:
    doc = ALL[uri]
    Draft202012Validator.check_schema(doc)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert doc["$id"].startswith(BASE_URI)
    assert "title" in doc and "description" in doc


@pytest.mark.parametrize("uri", sorted(ALL))
def test_every_schema_compiles_with_the_fast_validator(uri: str) -> None:
    registry().check(uri)


def test_unsupported_keyword_is_refused_at_compile_time(tmp_path: Any) -> None:
    (tmp_path / "x.json").write_text(json.dumps({"$id": BASE_URI + "x.json", "type": "object", "if": {}}))
    with pytest.raises(ValueError, match="not supported"):
        Registry(tmp_path).check("x.json")


def test_schemas_are_shipped_where_the_package_finds_them() -> None:
    assert os.path.isfile(os.path.join(schema_dir(), "task.json"))


# -- differential: the compiled validator and jsonschema agree -------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["", "a", "high", "medium", "low", "urgent", "2026-01-25T10:00:00Z", "2026-01-25", "task-1",
                     "../x", "in-progress", "CLOSED", "OPEN", "HALF_OPEN", "x" * 130]),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.sampled_from(["a", "id", "title", "tasks"]), children, max_size=3)),
    max_leaves=8,
)

TASK_FIELDS = list(task("t1"))


@st.composite
def mutated_tasks(draw: st.DrawFn) -> dict[str, Any]:
    """A valid task with a few fields replaced, removed or added: near the boundary, where bugs live."""
    doc = task("t1", attempts=[{"attempt_number": 1, "timestamp": "2026-01-25T10:00:00Z", "agent_id": "a",
                                "approach": "x", "error_type": "timeout", "error_message": "m"}])
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["replace", "remove", "add", "nested"]))
        field = draw(st.sampled_from(TASK_FIELDS))
        if action == "replace":
            doc[field] = draw(json_values)
        elif action == "remove":
            doc.pop(field, None)
        elif action == "add":
            doc[draw(st.sampled_from(["extra", "priorty", "x"]))] = draw(json_scalars)
        elif isinstance(doc.get("attempts"), list) and doc["attempts"] and isinstance(doc["attempts"][0], dict):
            key = draw(st.sampled_from(["attempt_number", "error_type", "timestamp", "new"]))
            doc["attempts"][0][key] = draw(json_scalars)
    return doc


@pytest.mark.slow  # fuzz: the compiled validator against jsonschema on generated documents
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(mutated_tasks())
def test_task_verdicts_agree(doc: dict[str, Any]) -> None:
    assert (registry().problems("task.json", doc) == []) == reference_ok("task.json", doc)


@pytest.mark.slow  # fuzz: the compiled validator against jsonschema on generated documents
@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, st.lists(mutated_tasks(), max_size=2),
                 st.builds(lambda ts: {"version": 1, "tasks": ts}, st.lists(mutated_tasks(), max_size=2))))
def test_queue_file_verdicts_agree(doc: Any) -> None:
    assert (registry().problems("queue-file.json", doc) == []) == reference_ok("queue-file.json", doc)


breaker_entries = st.fixed_dictionaries(
    {"state": st.sampled_from(["CLOSED", "OPEN", "HALF_OPEN", "closed"]),
     "failure_count": st.one_of(st.integers(-1, 4), st.just(1.0), st.just(True)),
     "last_failure_time": st.sampled_from([None, "2026-01-25T10:00:00Z", "yesterday"]),
     "last_state_change": st.sampled_from(["2026-01-25T10:00:00Z", None])},
    optional={"cooldown_until": st.sampled_from([None, "2026-01-25T10:05:00Z", 3]),
              "bogus": st.integers()},
)


@pytest.mark.slow  # fuzz: the compiled validator against jsonschema on generated documents
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["api/claude", "", "x" * 201]), breaker_entries, max_size=3))
def test_breaker_file_verdicts_agree(doc: dict[str, Any]) -> None:
    ok = registry().problems("circuit-breakers-file.json", doc) == []
    assert ok == reference_ok("circuit-breakers-file.json", doc)


@pytest.mark.slow  # fuzz: the compiled validator against jsonschema on generated documents
@settings(max_examples=300, deadline=None)
@given(json_values)
def test_verdicts_agree_on_arbitrary_json_for_every_schema(doc: Any) -> None:
    for uri in ALL:
        if uri.endswith("common.json"):
            continue
        assert (registry().problems(uri, doc) == []) == reference_ok(uri, doc), uri


def test_error_pointer_and_message() -> None:
    doc = {"version": 1, "tasks": [task("a"), task("b", priority="urgent")]}
    problems = registry().problems("queue-file.json", doc)
    assert problems == [("/tasks/1/priority", '"urgent" is not one of ["high", "medium", "low"]')]
    bad = task("a")
    bad["priorty"] = "high"
    assert registry().problems("task.json", bad) == [("", "additional property 'priorty' is not allowed")]


def test_booleans_are_not_integers() -> None:
    assert registry().problems("task.json", task("a", max_attempts=True)) != []
    assert registry().problems("task.json", task("a", max_attempts=5.0)) == []  # JSON: 5.0 is an integer


def test_schema_files_are_named_after_their_id() -> None:
    # The hot path loads a schema by turning its $id into a file name.
    for name in os.listdir(schema_dir()):
        with open(os.path.join(schema_dir(), name)) as f:
            assert json.load(f)["$id"] == BASE_URI + name


def test_patterns_do_not_accept_a_trailing_newline() -> None:
    # Python's `$` (which jsonschema uses too) also matches before a final newline.
    for uri, doc in ALL.items():
        assert '$"' not in json.dumps(doc).replace('\\\\', ''), uri
    for bad in ("t1\n", "2026-01-25T10:00:00Z\n"):
        doc = task("t1", id=bad) if not bad.startswith("2026") else task("t1", available_at=bad)
        assert registry().problems("task.json", doc) != []
        assert not reference_ok("task.json", doc)


def test_a_check_asked_for_while_another_thread_compiles_it_waits_for_the_whole_of_it() -> None:
    """loki serve answers hooks in threads over one process-wide registry: a thread asking for a schema another
    thread is compiling waits, and never meets the recursive-schema trampoline still empty (IndexError)."""
    import threading

    from loki.storage.schema import Registry

    registry = Registry()
    real = registry._compile
    compiling, go_on = threading.Event(), threading.Event()

    def slow_compile(schema: object, base: str) -> object:
        compiling.set()
        assert go_on.wait(30)
        return real(schema, base)

    registry._compile = slow_compile  # type: ignore[method-assign, assignment]
    first = threading.Thread(target=registry.check, args=("strikes-file.json",))
    first.start()
    assert compiling.wait(30)
    registry._compile = real  # type: ignore[method-assign]
    found: list[object] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            found.append(registry.problems("strikes-file.json", {"keys": {}}))
        except BaseException as exc:  # what the race raised: IndexError
            errors.append(exc)

    second = threading.Thread(target=ask)
    second.start()
    second.join(0.2)
    assert errors == [] and found == []  # waiting for the compilation, not calling a half-made check
    go_on.set()
    first.join(30)
    second.join(30)
    assert errors == [] and len(found) == 1 and isinstance(found[0], list)
