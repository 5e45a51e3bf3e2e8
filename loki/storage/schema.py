"""Schemas: loading them, and a small compiled validator for the hot path.

Every file kind has a draft 2020-12 schema in ``schemas/``. Two validators read them:

* ``jsonschema`` (the reference implementation) backs ``loki validate`` and checks
  that the schemas themselves are valid draft 2020-12;
* this module compiles the *subset* of keywords loki's schemas use into plain
  closures. It imports nothing heavier than ``re`` and validates a task in a few
  microseconds, so a ``loki queue claim`` never pays jsonschema's ~90 ms import.

A keyword outside the subset is a compile error, so a schema can never silently
mean less here than it does to jsonschema; the test suite checks both validators
agree on generated documents (tests/storage/files/test_schema.py).

Errors are ``(json_pointer, message)`` pairs.
"""

from __future__ import annotations

import _thread  # the C module threading wraps: always loaded, nothing to import on the hooks' cold path
import json
import os
import re

from loki.errors import SchemaViolation

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any, TypeAlias

    Problems: TypeAlias = list[tuple[str, str]]
    Check: TypeAlias = Callable[[Any, tuple[str, ...], Problems], None]

BASE_URI = "https://loki.invalid/schemas/"

# Keywords that carry no validation meaning here (annotations and bookkeeping).
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$defs", "$comment", "title", "description", "default", "examples", "format",
     "deprecated", "readOnly", "writeOnly"}
)
_SUPPORTED = _ANNOTATIONS | frozenset(
    {"type", "enum", "const", "properties", "required", "additionalProperties", "propertyNames",
     "items", "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum", "maximum",
     "minProperties", "anyOf", "oneOf", "$ref"}
)


def schema_dir() -> str:
    """Where the schemas are: inside the installed wheel, or at the top of a source checkout."""
    from loki.storage.paths import resource_dir

    return resource_dir("schemas")


def pointer(path: Iterable[str]) -> str:
    """RFC 6901 JSON pointer for a path of keys/indices."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float))
    raise ValueError(f"unknown JSON Schema type {name!r}")


def _json_equal(a: Any, b: Any) -> bool:
    # JSON equality: booleans are not numbers.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


class Registry:
    """All schemas in ``schemas/``, by ``$id``, compiled on first use."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = os.fspath(directory) if directory is not None else schema_dir()
        self._raw: dict[str, dict[str, Any]] = {}
        self._compiled: dict[str, Check] = {}
        """Finished checks only: read without a lock, so a thread never meets a half-compiled one."""
        self._staging: dict[str, Check] = {}
        """What the compilation in progress has made (trampolines included), published whole when it ends."""
        self._compiling = _thread.RLock()
        self._loaded = False

    def _load(self) -> None:
        """Read every schema (``loki validate``, tests); the hot path reads only what it needs."""
        if self._loaded:
            return
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(".json"):
                self._read(name)
        self._loaded = True

    def _read(self, filename: str) -> dict[str, Any]:
        with open(os.path.join(self.directory, filename), encoding="utf-8") as f:
            doc: dict[str, Any] = json.load(f)
        self._raw[doc["$id"]] = doc
        return doc

    def uri(self, name: str) -> str:
        return name if ":" in name else BASE_URI + name

    def raw(self, name: str) -> dict[str, Any]:
        uri = self.uri(name)
        if uri not in self._raw and uri.startswith(BASE_URI):
            # A schema's file is named after its $id, so one file is enough.
            filename = uri[len(BASE_URI):]
            if os.path.isfile(os.path.join(self.directory, filename)):
                self._read(filename)
        try:
            return self._raw[uri]
        except KeyError:
            raise KeyError(f"no schema {name!r} in {self.directory}") from None

    def all_raw(self) -> dict[str, dict[str, Any]]:
        self._load()
        return dict(self._raw)

    def check(self, name: str) -> Check:
        uri = self.uri(name)
        compiled = self._compiled.get(uri + "#")
        if compiled is None:
            # One compilation at a time (loki serve answers hooks in threads): a recursive schema's trampoline
            # is empty until its compilation ends, and another thread calling it then raised IndexError.
            with self._compiling:
                compiled = self._compiled.get(uri + "#")
                if compiled is None:
                    try:
                        compiled = self._compile_ref(uri)
                        self._compiled.update(self._staging)
                    finally:
                        self._staging = {}
        return compiled

    def problems(self, name: str, value: Any) -> Problems:
        found: Problems = []
        self.check(name)(value, (), found)
        return found

    def validate(self, name: str, value: Any, where: str) -> None:
        """Raise :class:`SchemaViolation` naming ``where`` and the first pointer that fails."""
        found = self.problems(name, value)
        if found:
            raise SchemaViolation(where, found)

    # -- compilation ---------------------------------------------------------------------------

    def _resolve(self, ref: str, base: str) -> tuple[dict[str, Any], str]:
        doc_uri, _, fragment = ref.partition("#")
        if not doc_uri:
            doc_uri = base
        elif ":" not in doc_uri:
            doc_uri = base.rsplit("/", 1)[0] + "/" + doc_uri
        node: Any = self.raw(doc_uri)
        for part in fragment.split("/")[1:] if fragment else []:
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node, doc_uri

    def _compile_ref(self, ref: str, base: str = "") -> Check:
        node, doc_uri = self._resolve(ref, base or ref.partition("#")[0])
        key = doc_uri + "#" + ref.partition("#")[2]
        found = self._compiled.get(key) or self._staging.get(key)
        if found is not None:
            return found
        # Register a trampoline first so recursive schemas compile.
        slot: list[Check] = []

        def trampoline(value: Any, path: tuple[str, ...], problems: Problems) -> None:
            slot[0](value, path, problems)

        self._staging[key] = trampoline
        compiled = self._compile(node, doc_uri)
        slot.append(compiled)
        self._staging[key] = compiled
        return compiled

    def _compile(self, schema: Any, base: str) -> Check:
        if schema is True:
            return _accept
        if schema is False:
            return _reject
        unknown = set(schema) - _SUPPORTED
        if unknown:
            raise ValueError(f"schema keyword(s) {sorted(unknown)} not supported by loki's validator ({base})")
        base = schema.get("$id", base)
        checks: list[Check] = []
        if "$ref" in schema:
            checks.append(self._compile_ref(schema["$ref"], base))
        if "type" in schema:
            checks.append(_type_check(schema["type"]))
        if "enum" in schema:
            checks.append(_enum_check(schema["enum"]))
        if "const" in schema:
            checks.append(_enum_check([schema["const"]]))
        string_checks = _string_checks(schema)
        if string_checks:
            checks.append(string_checks)
        number_checks = _number_checks(schema)
        if number_checks:
            checks.append(number_checks)
        if any(k in schema for k in ("properties", "required", "additionalProperties", "propertyNames",
                                     "minProperties")):
            checks.append(self._object_check(schema, base))
        if any(k in schema for k in ("items", "minItems", "maxItems")):
            checks.append(self._array_check(schema, base))
        if "anyOf" in schema:
            checks.append(self._combinator([self._compile(s, base) for s in schema["anyOf"]], one=False))
        if "oneOf" in schema:
            checks.append(self._combinator([self._compile(s, base) for s in schema["oneOf"]], one=True))
        if len(checks) == 1:
            return checks[0]

        def all_of(value: Any, path: tuple[str, ...], problems: Problems) -> None:
            for check in checks:
                check(value, path, problems)

        return all_of

    def _object_check(self, schema: dict[str, Any], base: str) -> Check:
        properties = {k: self._compile(v, base) for k, v in schema.get("properties", {}).items()}
        required = list(schema.get("required", []))
        extra = schema.get("additionalProperties", True)
        extra_check = None if extra is True else (None if extra is False else self._compile(extra, base))
        forbid_extra = extra is False
        names = schema.get("propertyNames")
        names_check = self._compile(names, base) if names is not None else None
        min_props = schema.get("minProperties")

        def check_object(value: Any, path: tuple[str, ...], problems: Problems) -> None:
            if not isinstance(value, dict):
                return
            for name in required:
                if name not in value:
                    problems.append((pointer(path), f"{name!r} is a required property"))
            if min_props is not None and len(value) < min_props:
                problems.append((pointer(path), f"expected at least {min_props} properties"))
            for key, item in value.items():
                sub = properties.get(key)
                if names_check is not None:
                    before = len(problems)
                    names_check(key, (*path, key), problems)
                    if len(problems) > before:
                        del problems[before:]
                        problems.append((pointer(path), f"property name {key!r} is not allowed"))
                if sub is not None:
                    sub(item, (*path, key), problems)
                elif forbid_extra:
                    problems.append((pointer(path), f"additional property {key!r} is not allowed"))
                elif extra_check is not None:
                    extra_check(item, (*path, key), problems)

        return check_object

    def _array_check(self, schema: dict[str, Any], base: str) -> Check:
        items = self._compile(schema["items"], base) if "items" in schema else None
        min_items = schema.get("minItems")
        max_items = schema.get("maxItems")

        def check_array(value: Any, path: tuple[str, ...], problems: Problems) -> None:
            if not isinstance(value, list):
                return
            if min_items is not None and len(value) < min_items:
                problems.append((pointer(path), f"expected at least {min_items} items, got {len(value)}"))
            if max_items is not None and len(value) > max_items:
                problems.append((pointer(path), f"expected at most {max_items} items, got {len(value)}"))
            if items is not None:
                for index, item in enumerate(value):
                    items(item, (*path, str(index)), problems)

        return check_array

    @staticmethod
    def _combinator(options: list[Check], *, one: bool) -> Check:
        def check_of(value: Any, path: tuple[str, ...], problems: Problems) -> None:
            matched = 0
            best: Problems | None = None
            best_rank: tuple[int, int] | None = None
            here = pointer(path)
            for option in options:
                found: Problems = []
                option(value, path, found)
                if not found:
                    matched += 1
                    continue
                # Report the shape the value was evidently meant to have: an option whose very
                # type does not fit, or that refuses one of the value's own keys (loki's queue file
                # has a "version", Loki Mode's has none), ranks after one that fails deeper inside.
                wrong_type = any(p == here and m.startswith(("expected ", "additional property "))
                                 for p, m in found)
                rank = (1 if wrong_type else 0, len(found))
                if best_rank is None or rank < best_rank:
                    best, best_rank = found, rank
            if matched == 0:
                problems.extend(best or [(pointer(path), "matches none of the allowed shapes")])
            elif one and matched > 1:
                problems.append((pointer(path), "matches more than one of the allowed shapes"))

        return check_of


def _accept(value: Any, path: tuple[str, ...], problems: Problems) -> None:
    return None


def _reject(value: Any, path: tuple[str, ...], problems: Problems) -> None:
    problems.append((pointer(path), "no value is allowed here"))


def _type_check(expected: str | list[str]) -> Check:
    names = [expected] if isinstance(expected, str) else list(expected)
    for name in names:
        _is_type(None, name)  # fail at compile time on an unknown type name
    label = " or ".join(names)

    def check_type(value: Any, path: tuple[str, ...], problems: Problems) -> None:
        for name in names:
            if _is_type(value, name):
                return
        problems.append((pointer(path), f"expected {label}, got {_type_name(value)}"))

    return check_type


def _enum_check(allowed: list[Any]) -> Check:
    def check_enum(value: Any, path: tuple[str, ...], problems: Problems) -> None:
        for option in allowed:
            if _json_equal(value, option):
                return
        shown = allowed[0] if len(allowed) == 1 else allowed
        verb = "is not" if len(allowed) == 1 else "is not one of"
        problems.append((pointer(path), f"{_short(value)} {verb} {json.dumps(shown)}"))

    return check_enum


def _short(value: Any) -> str:
    """A value for a message, redacted first: a refused value may be a secret (a database URL with its
    password, a token pasted into the wrong field), and messages reach terminals and logs."""
    from loki.text.redact import redact  # only when there is something to report

    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, float) else repr(value)
    text = redact(text)
    return text if len(text) <= 60 else text[:57] + "..."


def _string_checks(schema: dict[str, Any]) -> Check | None:
    min_len = schema.get("minLength")
    max_len = schema.get("maxLength")
    regex = re.compile(schema["pattern"]) if "pattern" in schema else None
    if min_len is None and max_len is None and regex is None:
        return None

    def check_string(value: Any, path: tuple[str, ...], problems: Problems) -> None:
        if not isinstance(value, str):
            return
        if min_len is not None and len(value) < min_len:
            problems.append((pointer(path), f"{_short(value)} is shorter than {min_len} characters"))
        if max_len is not None and len(value) > max_len:
            problems.append((pointer(path), f"string is longer than {max_len} characters"))
        if regex is not None and regex.search(value) is None:
            problems.append((pointer(path), f"{_short(value)} does not match {regex.pattern!r}"))

    return check_string


def _number_checks(schema: dict[str, Any]) -> Check | None:
    minimum = schema.get("minimum")
    maximum = schema.get("maximum")
    if minimum is None and maximum is None:
        return None

    def check_number(value: Any, path: tuple[str, ...], problems: Problems) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        if minimum is not None and value < minimum:
            problems.append((pointer(path), f"{value} is less than the minimum of {minimum}"))
        if maximum is not None and value > maximum:
            problems.append((pointer(path), f"{value} is greater than the maximum of {maximum}"))

    return check_number


_default_registry: Registry | None = None


def registry() -> Registry:
    """The process-wide registry of the shipped schemas."""
    global _default_registry
    if _default_registry is None:
        _default_registry = Registry()
    return _default_registry
