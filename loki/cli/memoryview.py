"""How error memory looks in a terminal: search hits, stats, reindex and compaction reports.

Rendering only: the commands in :mod:`loki.cli.errormemory` call the library and pass its values here.
"""

from __future__ import annotations

from typing import Any

from loki.cli.common import console, say, table

MARK_OPEN, MARK_CLOSE = "\x02", "\x03"
"""Snippet markers asked of the index for the terminal (never in text; the JSON output uses ``**``)."""


def highlighted(snippet: str) -> Any:
    """The snippet as rich Text, the matched words in bold yellow (the marks are \x02 and \x03; any other control
    character in the stored text is made visible)."""
    from rich.text import Text

    from loki.text.textsafe import for_terminal

    text = Text()
    rest = " ".join(snippet.replace("\n", " ").split())
    while rest:
        start = rest.find(MARK_OPEN)
        if start < 0:
            text.append(for_terminal(rest))
            break
        end = rest.find(MARK_CLOSE, start)
        if end < 0:
            end = len(rest)
        text.append(for_terminal(rest[:start]))
        text.append(for_terminal(rest[start + 1 : end]), style="bold yellow")
        rest = rest[end + 1 :]
    return text


def when_later(calls: int) -> str:
    return "right after" if calls == 0 else f"{calls} call{'s' if calls != 1 else ''} later"


def resolution_line(resolution: dict[str, Any]) -> str:
    if resolution.get("same_input"):
        # A rerun (unchanged, or with only an output flag) fixed nothing itself: no confidence to give.
        return f"passed on retry (`{resolution['resolution']}`, {when_later(resolution['calls_between'])})"
    return (f"fixed by `{resolution['resolution']}` ({when_later(resolution['calls_between'])}, confidence "
            f"{resolution['confidence']:.2f})")


def refs_text(refs: list[dict[str, Any]], shown: int = 5) -> str:
    parts = [f"{r['file']}:{r['line']}" + (f":{r['column']}" if r.get("column") is not None else "")
             for r in refs[:shown]]
    more = f" (+{len(refs) - shown} more)" if len(refs) > shown else ""
    return ", ".join(parts) + more


def print_hits(query: str, hits: list[dict[str, Any]]) -> None:
    from rich.text import Text

    from loki.text.textsafe import for_terminal

    out = console()
    for hit in hits:
        seen = f"{hit['occurrences']}x, last {hit['last_seen']}"
        if hit["occurrences"] > 1:
            seen += f" (first {hit['first_seen']})"
        # Text is never parsed as markup; for_terminal makes the control characters a command's output carried
        # visible (a stored error is hostile text: loki/text/textsafe.py).
        head = Text(f"{hit['rank']}. ", style="bold")
        head.append(for_terminal(f"{hit['tool']} `{_short(hit['command'], 100)}`"), style="bold")
        where = f"  [{hit.get('error_class') or 'unknown'}] {seen}; branch {hit.get('branch') or '-'}"
        head.append(for_terminal(where))
        out.print(head, soft_wrap=True)
        out.print(Text("   ") + Text(for_terminal(_short(hit["error_message"], 200))), soft_wrap=True)
        snippet = highlighted(hit.get("snippet") or "")
        if snippet.plain and snippet.plain not in hit["error_message"]:
            out.print(Text("   ") + snippet, soft_wrap=True)
        if hit["file_references"]:
            say(f"   at: {refs_text(hit['file_references'])}")
        if hit.get("resolution"):
            fixed = for_terminal(resolution_line(hit["resolution"]))
            out.print(Text("   ") + Text(fixed, style="green"), soft_wrap=True)
    say(f"{len(hits)} result(s) for {query!r}")


def print_stats(stats: dict[str, Any]) -> None:
    share = f"{stats['resolved_share'] * 100:.1f}%"
    say(f"error memory: {stats['errors']} error(s) in {stats['patterns']} pattern(s); {stats['resolutions']} "
        f"resolution(s); {stats['resolved_patterns']} pattern(s) resolved ({share})")
    if stats["by_class"]:
        table("by class", ["class", "patterns", "errors", "resolved"],
              [[c["error_class"], c["patterns"], c["occurrences"], c["resolved"]] for c in stats["by_class"]])
    if stats["most_frequent"]:
        table("most frequent", ["times", "class", "command", "error", "resolution"],
              [[p["occurrences"], p.get("error_class") or "", _short(p["command"], 60), _short(p["error_message"], 80),
                resolution_line(p["resolution"]) if p.get("resolution") else ""] for p in stats["most_frequent"]])
    if stats["skipped_lines"]:
        numbers = ", ".join(str(n) for n in stats["skipped_line_numbers"][-10:])
        say(f"{stats['skipped_lines']} unreadable line(s) skipped (last: {numbers}); `loki errors compact` sets "
            "them aside")


def print_reindex(report: dict[str, Any], seconds: float) -> None:
    say(f"reindexed memory/errors.jsonl: {report['added']} record(s) ({report['offset']} bytes), "
        f"{report['skipped']} unreadable line(s) skipped, {report['hints']} prefix hint(s), in {seconds:.2f} s")


def print_compact(report: dict[str, Any]) -> None:
    say(f"compacted memory/errors.jsonl: {report['lines_before']} -> {report['lines_after']} line(s), "
        f"{report['bytes_before']} -> {report['bytes_after']} bytes")
    say(f"  {report['errors']} error(s) in {report['patterns']} pattern(s): {report['merged']} duplicate line(s) "
        f"merged, {report['dropped_patterns']} unresolved pattern(s) dropped ({report['dropped_errors']} error(s)) "
        f"to stay within {report['max_records']} lines")
    say(f"  {report['resolutions']} resolution(s) kept ({report['resolutions_merged']} duplicate(s) merged)")
    if report["corrupt_lines"]:
        say(f"  {len(report['corrupt_lines'])} unreadable line(s) moved to {report['corrupt_file']} "
            f"(line(s) {', '.join(str(n) for n in report['corrupt_lines'][:10])})")
    if report["over_bound"]:
        say(f"  still over {report['max_records']} lines: resolved patterns are never dropped")


def _short(text: str, limit: int) -> str:
    from loki.wording import shorten

    return shorten(text, limit)
