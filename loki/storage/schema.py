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

Each schema compiles into two closures: a predicate (is the value valid?) that builds no paths and collects
nothing, and the check that reports the problems. A write asks the predicate first, which is all a valid
document ever costs; the check runs only on a value the predicate refused, and descends only into the parts
the predicate refuses, so the problems and their order are those of a full walk.
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
    Valid: TypeAlias = Callable[[Any], bool]
    Compiled: TypeAlias = tuple[Check, Valid]

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
_TYPE_ONLY = _ANNOTATIONS | {"type"}
_OBJECT_KEYWORDS = frozenset({"properties", "required", "additionalProperties", "propertyNames", "minProperties"})
_ARRAY_KEYWORDS = frozenset({"items", "minItems", "maxItems"})


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


def _is_integer(value: Any) -> bool:
    return not isinstance(value, bool) and (isinstance(value, int) or (isinstance(value, float) and value.is_integer()))


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


# The JSON types that are exactly one Python type each (integer and number must also refuse a bool).
_PYTHON_TYPES: dict[str, type] = {"string": str, "object": dict, "array": list, "null": type(None), "boolean": bool}


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
        self._compiled: dict[str, Compiled] = {}
        """Finished checks only: read without a lock, so a thread never meets a half-compiled one."""
        self._staging: dict[str, Compiled] = {}
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
        """The check that reports every problem of a value (:meth:`problems` asks a cheaper predicate first)."""
        return self._checks(name)[0]

    def _checks(self, name: str) -> Compiled:
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
        check, valid = self._checks(name)
        found: Problems = []
        if not valid(value):
            check(value, (), found)
        return found

    def validate(self, name: str, value: Any, where: str) -> None:
        """Raise :class:`SchemaViolation` naming ``where`` and the first pointer that fails."""
        check, valid = self._checks(name)
        if valid(value):
            return
        found: Problems = []
        check(value, (), found)
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

    def _compile_ref(self, ref: str, base: str = "") -> Compiled:
        node, doc_uri = self._resolve(ref, base or ref.partition("#")[0])
        key = doc_uri + "#" + ref.partition("#")[2]
        found = self._compiled.get(key) or self._staging.get(key)
        if found is not None:
            return found
        # Register trampolines first so recursive schemas compile.
        slot: list[Compiled] = []

        def trampoline(value: Any, path: tuple[str, ...], problems: Problems) -> None:
            slot[0][0](value, path, problems)

        def valid_trampoline(value: Any) -> bool:
            return slot[0][1](value)

        self._staging[key] = (trampoline, valid_trampoline)
        compiled = self._compile(node, doc_uri)
        slot.append(compiled)
        self._staging[key] = compiled
        return compiled

    def _compile(self, schema: Any, base: str) -> Compiled:
        if schema is True:
            return _accept, _always
        if schema is False:
            return _reject, _never
        keywords = schema.keys()
        unknown = keywords - _SUPPORTED
        if unknown:
            raise ValueError(f"schema keyword(s) {sorted(unknown)} not supported by loki's validator ({base})")
        if keywords <= _TYPE_ONLY:  # most nodes: compiled once per list of type names, for every cold start
            return _type_check(schema["type"]) if "type" in schema else (_accept, _always)
        base = schema.get("$id", base)
        # The one type a value must have, if the schema names exactly one: the string, object and array
        # predicates then refuse any other type themselves, and the type's own predicate is left out.
        only_type = schema["type"] if isinstance(schema.get("type"), str) else None
        parts: list[Compiled] = []
        type_index: int | None = None
        type_covered = False
        if "$ref" in schema:
            parts.append(self._compile_ref(schema["$ref"], base))
        if "type" in schema:
            type_index = len(parts)
            parts.append(_type_check(schema["type"]))
        if "enum" in schema:
            parts.append(_enum_check(schema["enum"]))
        if "const" in schema:
            parts.append(_enum_check([schema["const"]]))
        string_checks = _string_checks(schema, strict=only_type == "string")
        if string_checks:
            parts.append(string_checks)
            type_covered = type_covered or only_type == "string"
        number_checks = _number_checks(schema)
        if number_checks:
            parts.append(number_checks)
        if not _OBJECT_KEYWORDS.isdisjoint(keywords):
            parts.append(self._object_check(schema, base, strict=only_type == "object"))
            type_covered = type_covered or only_type == "object"
        if not _ARRAY_KEYWORDS.isdisjoint(keywords):
            parts.append(self._array_check(schema, base, strict=only_type == "array"))
            type_covered = type_covered or only_type == "array"
        if "anyOf" in schema:
            parts.append(self._combinator([self._compile(s, base) for s in schema["anyOf"]], one=False))
        if "oneOf" in schema:
            parts.append(self._combinator([self._compile(s, base) for s in schema["oneOf"]], one=True))
        if not parts:  # annotations only
            return _accept, _always
        if len(parts) == 1:
            return parts[0]
        checks = [check for check, _ in parts]
        valids = [valid for index, (_, valid) in enumerate(parts) if not (type_covered and index == type_index)]

        def all_of(value: Any, path: tuple[str, ...], problems: Problems) -> None:
            for check in checks:
                check(value, path, problems)

        return all_of, _conjunction(valids)

    def _object_check(self, schema: dict[str, Any], base: str, *, strict: bool) -> Compiled:
        compiled = {k: self._compile(v, base) for k, v in schema.get("properties", {}).items()}
        properties = {k: check for k, (check, _) in compiled.items()}
        properties_valid = {k: valid for k, (_, valid) in compiled.items()}
        required = list(schema.get("required", []))
        extra = schema.get("additionalProperties", True)
        extra_check, extra_valid = (None, None) if extra is True or extra is False else self._compile(extra, base)
        forbid_extra = extra is False
        names = schema.get("propertyNames")
        names_check, names_valid = self._compile(names, base) if names is not None else (None, None)
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
                if names_check is not None and names_valid is not None and not names_valid(key):
                    before = len(problems)
                    names_check(key, (*path, key), problems)
                    if len(problems) > before:
                        del problems[before:]
                        problems.append((pointer(path), f"property name {key!r} is not allowed"))
                if sub is not None:
                    if not properties_valid[key](item):
                        sub(item, (*path, key), problems)
                elif forbid_extra:
                    problems.append((pointer(path), f"additional property {key!r} is not allowed"))
                elif extra_check is not None and extra_valid is not None and not extra_valid(item):
                    extra_check(item, (*path, key), problems)

        required_keys = frozenset(required)
        # A property whose predicate is one isinstance is tested inline: most of a task's fields are.
        plain = {k: _PLAIN_TYPES[valid] for k, valid in properties_valid.items() if valid in _PLAIN_TYPES}
        called = {k: valid for k, valid in properties_valid.items() if valid not in _PLAIN_TYPES}

        def valid_object(value: Any) -> bool:
            if not isinstance(value, dict):
                return not strict
            if required_keys and not value.keys() >= required_keys:
                return False
            if min_props is not None and len(value) < min_props:
                return False
            for key, item in value.items():
                if names_valid is not None and not names_valid(key):
                    return False
                types = plain.get(key)
                if types is not None:
                    if not isinstance(item, types):
                        return False
                    continue
                sub = called.get(key)
                if sub is not None:
                    if not sub(item):
                        return False
                elif forbid_extra or (extra_valid is not None and not extra_valid(item)):
                    return False
            return True

        return check_object, valid_object

    def _array_check(self, schema: dict[str, Any], base: str, *, strict: bool) -> Compiled:
        items, items_valid = self._compile(schema["items"], base) if "items" in schema else (None, None)
        min_items = schema.get("minItems")
        max_items = schema.get("maxItems")

        def check_array(value: Any, path: tuple[str, ...], problems: Problems) -> None:
            if not isinstance(value, list):
                return
            if min_items is not None and len(value) < min_items:
                problems.append((pointer(path), f"expected at least {min_items} items, got {len(value)}"))
            if max_items is not None and len(value) > max_items:
                problems.append((pointer(path), f"expected at most {max_items} items, got {len(value)}"))
            if items is not None and items_valid is not None:
                for index, item in enumerate(value):
                    if not items_valid(item):
                        items(item, (*path, str(index)), problems)

        def valid_array(value: Any) -> bool:
            if not isinstance(value, list):
                return not strict
            if min_items is not None and len(value) < min_items:
                return False
            if max_items is not None and len(value) > max_items:
                return False
            if items_valid is not None:
                for item in value:
                    if not items_valid(item):
                        return False
            return True

        return check_array, valid_array

    @staticmethod
    def _combinator(options: list[Compiled], *, one: bool) -> Compiled:
        def check_of(value: Any, path: tuple[str, ...], problems: Problems) -> None:
            matched = 0
            best: Problems | None = None
            best_rank: tuple[int, int] | None = None
            here: str | None = None
            for option, option_valid in options:
                if option_valid(value):
                    matched += 1
                    continue
                found: Problems = []
                option(value, path, found)
                # Report the shape the value was evidently meant to have: an option whose very
                # type does not fit, or that refuses one of the value's own keys (loki's queue file
                # has a "version", Loki Mode's has none), ranks after one that fails deeper inside.
                if here is None:
                    here = pointer(path)
                wrong_type = any(p == here and m.startswith(("expected ", "additional property "))
                                 for p, m in found)
                rank = (1 if wrong_type else 0, len(found))
                if best_rank is None or rank < best_rank:
                    best, best_rank = found, rank
            if matched == 0:
                problems.extend(best or [(pointer(path), "matches none of the allowed shapes")])
            elif one and matched > 1:
                problems.append((pointer(path), "matches more than one of the allowed shapes"))

        valids = [valid for _, valid in options]

        def valid_any(value: Any) -> bool:
            for valid in valids:  # noqa: SIM110 -- a loop: any() over a generator costs twice as much here
                if valid(value):
                    return True
            return False

        def valid_one(value: Any) -> bool:
            matched = 0
            for valid in valids:
                if valid(value):
                    matched += 1
                    if matched > 1:
                        return False
            return matched == 1

        return check_of, valid_one if one else valid_any


def _conjunction(valids: list[Valid]) -> Valid:
    if len(valids) == 1:
        return valids[0]
    if len(valids) == 2:
        first, second = valids

        def valid_both(value: Any) -> bool:
            return first(value) and second(value)

        return valid_both

    def valid_all(value: Any) -> bool:
        for valid in valids:  # noqa: SIM110 -- a loop: all() over a generator costs twice as much here
            if not valid(value):
                return False
        return True

    return valid_all


def _accept(value: Any, path: tuple[str, ...], problems: Problems) -> None:
    return None


def _reject(value: Any, path: tuple[str, ...], problems: Problems) -> None:
    problems.append((pointer(path), "no value is allowed here"))


def _always(value: Any) -> bool:
    return True


def _never(value: Any) -> bool:
    return False


_PLAIN_TYPES: dict[Valid, tuple[type, ...]] = {_always: (object,)}
"""Predicates that are one ``isinstance``, with its types: an object's predicate tests such a property inline."""
_TYPE_TESTS: dict[tuple[str, ...], Valid] = {}
"""One predicate per list of type names, shared by every schema that names it (so _PLAIN_TYPES stays small)."""


def _type_test(names: tuple[str, ...]) -> Valid:
    """_is_type for any of ``names``, without comparing strings on every call."""
    test = _TYPE_TESTS.get(names)
    if test is not None:
        return test
    if all(name in _PYTHON_TYPES for name in names):
        types = tuple(_PYTHON_TYPES[name] for name in names)

        def test(value: Any) -> bool:
            return isinstance(value, types)

        _PLAIN_TYPES[test] = types
    elif names == ("integer",):
        test = _is_integer
    elif names == ("number",):
        test = _is_number
    else:
        def test(value: Any) -> bool:
            for name in names:  # noqa: SIM110 -- a loop: any() over a generator costs twice as much here
                if _is_type(value, name):
                    return True
            return False

    _TYPE_TESTS[names] = test
    return test


_TYPE_CHECKS: dict[tuple[str, ...], Compiled] = {}


def _type_check(expected: str | list[str]) -> Compiled:
    names = (expected,) if isinstance(expected, str) else tuple(expected)
    compiled = _TYPE_CHECKS.get(names)
    if compiled is not None:
        return compiled
    for name in names:
        _is_type(None, name)  # fail at compile time on an unknown type name
    label = " or ".join(names)
    valid_type = _type_test(names)

    def check_type(value: Any, path: tuple[str, ...], problems: Problems) -> None:
        if not valid_type(value):
            problems.append((pointer(path), f"expected {label}, got {_type_name(value)}"))

    compiled = _TYPE_CHECKS[names] = check_type, valid_type
    return compiled


def _enum_check(allowed: list[Any]) -> Compiled:
    def check_enum(value: Any, path: tuple[str, ...], problems: Problems) -> None:
        if valid_enum(value):
            return
        shown = allowed[0] if len(allowed) == 1 else allowed
        verb = "is not" if len(allowed) == 1 else "is not one of"
        problems.append((pointer(path), f"{_short(value)} {verb} {json.dumps(shown)}"))

    if all(isinstance(option, str) for option in allowed):
        # Only a string equals a string in JSON (and a string is hashable): a set lookup is the whole test.
        strings = frozenset(allowed)

        def valid_enum(value: Any) -> bool:
            return isinstance(value, str) and value in strings
    else:
        def valid_enum(value: Any) -> bool:
            for option in allowed:  # noqa: SIM110 -- a loop: any() over a generator costs twice as much here
                if _json_equal(value, option):
                    return True
            return False

    return check_enum, valid_enum


def _short(value: Any) -> str:
    """A value for a message, redacted first: a refused value may be a secret (a database URL with its
    password, a token pasted into the wrong field), and messages reach terminals and logs."""
    from loki.text.redact import redact  # only when there is something to report

    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, float) else repr(value)
    text = redact(text)
    return text if len(text) <= 60 else text[:57] + "..."


def _string_checks(schema: dict[str, Any], *, strict: bool) -> Compiled | None:
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

    def valid_string(value: Any) -> bool:
        if not isinstance(value, str):
            return not strict
        if min_len is not None and len(value) < min_len:
            return False
        if max_len is not None and len(value) > max_len:
            return False
        return regex is None or regex.search(value) is not None

    return check_string, valid_string


def _number_checks(schema: dict[str, Any]) -> Compiled | None:
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

    def valid_number(value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return True
        return (minimum is None or value >= minimum) and (maximum is None or value <= maximum)

    return check_number, valid_number


_default_registry: Registry | None = None


def registry() -> Registry:
    """The process-wide registry of the shipped schemas."""
    global _default_registry
    if _default_registry is None:
        _default_registry = Registry()
    return _default_registry
