"""Reading one YAML (or JSON) file with errors that name the file, and the line.

Every file swarmgpu reads may come from someone else (a stack to render, a facts or GFD
file, a config), so it is read as hostile input, bounded before anything is built of it:
the text's size, the number of nodes once every alias is expanded (a 500-byte "billion
laughs" file would otherwise become gigabytes downstream), nesting depth and recursive
aliases. A file is read only as a regular file (``core.boundedfile``): a FIFO given as
the config would block the process for ever, a device be read to the limit. A key given
twice in one mapping is refused too, as docker's and Kubernetes' YAML readers refuse it:
PyYAML would silently keep the last one. An anchor defined twice is read as YAML and
docker read it (each alias names the nearest definition above it); PyYAML refuses it.
A value its tag cannot read (``!!int abc``, an integer of 5,000 digits) is an error at
its line, not PyYAML's ValueError.

Plain scalars resolve as docker 28 and later read a stack (go-yaml v3, ``core.goscalar``),
not as YAML 1.1 does: ``12:30`` is text, not the base-60 number 750; ``=`` is text
(PyYAML's safe loader has no constructor for it); ``1e3``, ``.5e3`` and ``08`` are floats,
``0o17`` and ``0X1F`` integers (YAML 1.1 reads each as text); only ``true`` and ``false``
are booleans (``y``, ``yes``, ``on`` are text). `render` writes back what it read, so a
value read otherwise than docker reads it would reach Swarm rewritten, in env and labels
that are not swarmgpu's; the config reads as the stacks do. In a stack (``docker``) what
docker 27 and older (go-yaml v2) read otherwise is refused, key or value, as users
deploy with either CLI: ``yes``, ``on``, ``y`` (booleans to v2), ``0o-17`` (text to v2)
and a plain timestamp (docker 28 gives the service Go's text of the time in its own
zone, docker 27 and older the text); the config, which only swarmgpu reads, takes them.
A tag of the stack's own (Compose's ``!reset``, ``!override``) is refused saying what
docker does with it: reads the value as if untagged; in any other file a tag of its own
is refused too (no reader of it knows one). YAML's non-specific tag, ``!`` alone
(``cpus: ! 2``), is refused in every file: PyYAML reads the value under it as if plain
(the number 2), docker 28 as text ("2"), docker 27 and older refuse it; so are
``!!set``, ``!!omap``, ``!!pairs`` and ``!!binary``, which build no plain value, any
other ``!!`` tag (``!!python/object``: no kind every reader shares), and a
second ``<<`` in one mapping (docker 28 refuses it, docker 27 merges both). A directive
(``%YAML 1.1``, ``%TAG``) is refused (``core.yamldirective``): docker refuses some,
and reads none as it says.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from swarmgpu.core import goscalar
from swarmgpu.core.boundedfile import (
    NotRegularFile,
    TooLarge,
    as_text,
    read_bounded_stream,
    read_bounded_text,
)
from swarmgpu.core.leadingzero import refuse_leading_zeros
from swarmgpu.core.yamldirective import Directive, refusal
from swarmgpu.core.yamlhints import syntax_hint
from swarmgpu.core.yamlnodes import (
    check_tag,
    key_once_read,
    merge_after_keys,
    merge_once,
    refuse_timestamp,
    scalar,
    two_readings,
)

MAX_TEXT = 8 * 1024 * 1024  # characters of text, bytes of a file; real ones are ~100 KiB
MAX_NODES = 200_000  # nodes once every alias is expanded (a big stack has a few thousand)
MAX_DEPTH = 100  # nesting; PyYAML's composer recurses per level

# Where each key of a mapping was written: the key's path (mapping keys, list indices)
# -> 1-based line.
Lines = dict[tuple[Any, ...], int]


class _Loader(yaml.SafeLoader):
    """The safe loader with docker/cli's plain scalars (``core.goscalar``): no base-60
    numbers or ``=``; ``1e3``, ``0o17``, ``08`` numbers; ``y`` text; a timestamp its text.
    ``plain``: the ids of the scalar nodes written plain with no tag (``!!str yes`` is
    text to every reader, plain ``yes`` not); ``bare``: of the nodes tagged ``!`` alone,
    YAML's non-specific tag, which PyYAML resolves away as if the node were plain.
    ``v2``: plain scalars as go-yaml v2 reads them where it reads them otherwise than v3
    (``goscalar.v2_reads_otherwise``): ``yes``, ``on``, ``y`` booleans, ``0o-17`` text."""

    def __init__(self, stream: str, v2: bool = False) -> None:
        super().__init__(stream)
        self.v2 = v2
        self.plain: set[int] = set()
        self.bare: dict[int, int] = {}  # node id -> the 1-based line of its ``!``
        self.nodes = 0  # composed (``MAX_NODES``)
        self.aliased: dict[int, Any] = {}  # key node id -> the mark of its value's alias

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        # Counted as composed: a file of a million values took 40 s to compose before
        # ``_check_tree`` counted them; each is at least one once aliases are expanded.
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _TooMany(self.peek_event().start_mark.line + 1)  # type: ignore[no-untyped-call]
        # An anchor defined again names the later node from there on, as YAML says and
        # docker's go-yaml (v2 and v3) reads it; PyYAML refuses it ("found duplicate
        # anchor"). Aliases above it were composed already and keep the earlier node.
        if not self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor  # type: ignore[no-untyped-call]
            if anchor is not None:
                self.anchors.pop(anchor, None)
        elif isinstance(index, yaml.Node):  # a mapping's value written as an alias
            self.aliased[id(index)] = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        return super().compose_node(parent, index)

    def fetch_directive(self) -> None:
        """A directive (``%YAML 1.1``) refused at its ``%`` (``core.yamldirective``)."""
        mark = self.get_mark()
        text = _BREAK.split(str(mark.buffer)[mark.pointer:], maxsplit=1)[0].rstrip("\0")
        if (why := refusal(text, self.v2)) is not None:
            raise Directive(mark.line + 1, text, why)
        super().fetch_directive()

    def _note_bare(self, event: Any, node: yaml.Node) -> None:
        if event.tag == "!":  # ``! 2``, ``!<!> 2``: the node's tag is already resolved
            self.bare[id(node)] = event.start_mark.line + 1

    def compose_scalar_node(self, anchor: Any) -> yaml.ScalarNode:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        node: yaml.ScalarNode = super().compose_scalar_node(anchor)
        if event.implicit[0] and event.style is None and event.tag is None:
            self.plain.add(id(node))
        self._note_bare(event, node)
        return node

    def compose_sequence_node(self, anchor: Any) -> yaml.SequenceNode:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        node: yaml.SequenceNode = super().compose_sequence_node(anchor)
        self._note_bare(event, node)
        return node

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        node: yaml.MappingNode = super().compose_mapping_node(anchor)
        self._note_bare(event, node)
        return node

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """Merge keys as YAML and go-yaml (v2 and v3) merge them: a mapping's own keys
        over the merged ones, and in ``<<: [*a, *b]`` the first listed mapping's key
        over a later one's. PyYAML 6.0.x keeps a merged key once by the id of its text,
        which two equal keys written apart do not share: b's ``image`` won."""
        merged: dict[Any, tuple[Any, Any]] = {}  # the key's name -> the pair merged
        own: list[tuple[Any, Any]] = []
        for key, value in node.value:
            if key.tag != "tag:yaml.org,2002:merge":
                own.append((key, value))
                continue
            if isinstance(value, yaml.SequenceNode) and id(key) in self.aliased:
                # go-yaml (v2, v3: docker) takes a list written there, not an alias to one
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    "an alias after << must name a mapping, not a list (docker refuses "
                    "it); write the list there: <<: [*a, *b]", self.aliased[id(key)])
            maps = value.value if isinstance(value, yaml.SequenceNode) else [value]
            for m in maps:
                if not isinstance(m, yaml.MappingNode):
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"expected a mapping or list of mappings for merging, but found {m.id}",
                        m.start_mark)
                self.flatten_mapping(m)
                # m flattened: its own keys, after what it merged, are its values
                pairs = {_key_name(k): (k, v) for k, v in m.value}
                for name, pair in pairs.items():
                    merged.setdefault(name, pair)
        if len(own) < len(node.value):
            node.value = [*merged.values(), *own]

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:  # plain: as go-yaml v3 reads it
            if self.v2 and (both := goscalar.v2_reads_otherwise(value)):
                return goscalar.STR if both[1] == "text" else goscalar.BOOL
            return "tag:yaml.org,2002:merge" if value == "<<" else goscalar.resolve(value)[0]
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]


def _key_name(key: yaml.Node) -> Any:
    return (key.tag, key.value) if isinstance(key, yaml.ScalarNode) else id(key)


class _TooMany(Exception):
    """More than ``MAX_NODES`` nodes composed, at the 1-based ``line``."""

    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


def _too_many(what: str, line: int) -> str:
    return (f"{what}: more than {MAX_NODES} values once its aliases are expanded (line "
            f"{line}); not read (an alias bomb, or a file far larger than any swarmgpu "
            "reads)")


try:  # libyaml's parser, where PyYAML has it
    from yaml._yaml import CParser
    _LIBYAML = True
except ImportError:  # pragma: no cover - a PyYAML built without libyaml
    _LIBYAML = False


class _CLoader(_Loader):
    """``_Loader`` taking its events from libyaml's parser, some five times faster than
    PyYAML's own (a 2 MiB spec: 4 s, 0.9 s); composed and checked as ever. go-yaml v2,
    which reads CDI's specs, is a port of libyaml: its scanner reads as theirs does.
    Unprintable characters are still refused by PyYAML's reader, with its words."""

    def __init__(self, stream: str, v2: bool = False) -> None:
        super().__init__(stream, v2)
        self.events = CParser(stream)

    def compose_document(self) -> yaml.Node | None:
        # libyaml's parser refuses an unknown directive, and takes %YAML 1.2, which
        # go-yaml v2 refuses (``core.yamldirective``); %TAG it reads as v2 does.
        event = self.peek_event()
        if (version := getattr(event, "version", None)) is not None:
            text = "%YAML {}.{}".format(*version)
            if (why := refusal(text, self.v2)) is not None:
                raise Directive(event.start_mark.line + 1, text, why)
        return super().compose_document()

    def check_event(self, *choices: Any) -> bool:
        return bool(self.events.check_event(*choices))

    def peek_event(self) -> Any:
        return self.events.peek_event()

    def get_event(self) -> Any:
        return self.events.get_event()


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    tag, value = goscalar.resolve(loader.construct_scalar(node))
    if tag != goscalar.INT:
        raise ValueError(node.value)  # !!int 08 or 1.5: go-yaml refuses it too
    return int(value)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    tag, value = goscalar.resolve(loader.construct_scalar(node))
    if tag not in (goscalar.INT, goscalar.FLOAT):
        raise ValueError(node.value)
    return float(value)  # go-yaml's !!float 1 is 1.0


def _construct_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    text = str(loader.construct_scalar(node))
    if getattr(loader, "v2", False) and text in goscalar.YAML11_BOOLS:
        return goscalar.YAML11_BOOLS[text]  # (go-yaml v2's booleans: YAML 1.1's words)
    tag, value = goscalar.resolve(text)
    if tag != goscalar.BOOL:
        raise ValueError(node.value)  # !!bool yes: go-yaml v3 refuses it too
    return bool(value)


def _construct_timestamp(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    text = str(loader.construct_scalar(node))
    if goscalar.resolve(text)[0] != goscalar.TIMESTAMP:
        raise ValueError(node.value)  # !!timestamp x
    return text  # the config's: a stack refuses it first


_Loader.add_constructor(goscalar.INT, _construct_int)
_Loader.add_constructor(goscalar.FLOAT, _construct_float)
_Loader.add_constructor(goscalar.BOOL, _construct_bool)
_Loader.add_constructor(goscalar.TIMESTAMP, _construct_timestamp)


def plain_is_text(text: str) -> bool:
    """Whether ``text`` written unquoted reads as a string here (``1e999``, ``inf`` do),
    for messages that say how a value was written."""
    return goscalar.resolve(text)[0] == goscalar.STR


def read_yaml(path: Path, what: str, error: type[Exception], *, fmt: str = "YAML",
              sole: bool = False) -> Any:
    """The file's parsed content (safe loader); ``error(...)`` naming ``what`` otherwise."""
    return read_yaml_lines(path, what, error, fmt=fmt, sole=sole)[0]


def read_yaml_lines(path: Path, what: str, error: type[Exception], *,
                    fmt: str = "YAML", sole: bool = False) -> tuple[Any, Lines]:
    """``read_yaml`` and the line of every mapping key (``Lines``)."""
    text = read_yaml_text(path, what, error, fmt=fmt)
    return parse_yaml_lines(text, what, error, fmt=fmt, sole=sole)


# A byte order mark of UTF-16 or UTF-32 (go-yaml, docker's reader, decodes such a file).
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
         (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def read_yaml_text(path: Path | str, what: str, error: type[Exception], *,
                   fmt: str = "YAML", other: str = "", stream: BinaryIO | None = None) -> str:
    """The text of the YAML file at ``path``, read as every file swarmgpu is named:
    only a regular file, at most ``MAX_TEXT`` bytes, UTF-8; ``error(...)`` naming
    ``what`` and the fix otherwise. ``other``: what else may be given instead of a path
    that is no regular file (render's ``, or - to read it from stdin``). ``stream``:
    read it instead (stdin, asked for with ``-``), as bounded."""
    try:
        # MAX_TEXT bytes: the text bound below, checked before a byte more is read; a
        # FIFO, device or directory is refused unopened for reading (core.boundedfile).
        if stream is not None:
            return as_text(read_bounded_stream(stream, MAX_TEXT))
        return read_bounded_text(path, MAX_TEXT)
    except NotRegularFile as e:
        raise error(f"{what}: {e.why}; give the path of the {fmt} file itself{other}") from None
    except TooLarge as e:
        raise error(f"{what}: {e.why}") from None
    except UnicodeDecodeError as e:
        raise error(f"{what}: {not_utf8(e)}") from None
    except OSError as e:
        raise error(f"{what}: cannot read it ({e.strerror or e})") from e


def not_utf8(e: UnicodeDecodeError) -> str:
    """Why bytes are not read as text, and the fix."""
    head = bytes(e.object[:4])
    kind = next((name for bom, name in _BOMS if head.startswith(bom)), None)
    if kind is not None:
        return (f"{kind} text (its byte order mark); swarmgpu reads UTF-8 only: save it "
                "as UTF-8")
    return (f"not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); save it "
            "as UTF-8")


def parse_yaml(text: str, what: str, error: type[Exception], *, fmt: str = "YAML",
               docker: bool = False, v2: bool = False) -> Any:
    """``text`` parsed (safe loader); ``error(...)`` naming ``what`` and the line otherwise.
    ``docker``: docker/cli reads the file too (a stack): what it reads otherwise is refused.
    ``v2``: its plain scalars read as go-yaml v2 reads them (``_Loader``): a file only a
    v2 reader reads (CDI's specs, sigs.k8s.io/yaml); not valid, its line and column said
    on one line (``_at_column``)."""
    return parse_yaml_lines(text, what, error, fmt=fmt, docker=docker, v2=v2)[0]


def parse_first_yaml(text: str, what: str, error: type[Exception]) -> tuple[Any, bool]:
    """The first YAML document of ``text``, as go-yaml v2's Unmarshal reads it (CDI's
    specs, ``parse_yaml``'s ``v2``), and whether another follows it, which that reader
    never parses."""
    data, _, more = _parse(text, what, error, "YAML", False, True, first=True)
    return data, more


def parse_yaml_lines(text: str, what: str, error: type[Exception], *, fmt: str = "YAML",
                     docker: bool = False, v2: bool = False,
                     sole: bool = False) -> tuple[Any, Lines]:
    """``parse_yaml`` and the line of every mapping key. Bounded: more than ``MAX_TEXT``
    characters, ``MAX_NODES`` nodes with aliases expanded, ``MAX_DEPTH`` levels, a
    recursive alias or a duplicate key is ``error(...)`` naming the limit or the key.
    ``sole``: only swarmgpu reads it: ``010`` is refused (``core.leadingzero``)."""
    data, lines, _ = _parse(text, what, error, fmt, docker, v2, sole=sole)
    return data, lines


def _parse(text: str, what: str, error: type[Exception], fmt: str, docker: bool,
           v2: bool, first: bool = False, sole: bool = False) -> tuple[Any, Lines, bool]:
    """``parse_yaml_lines``, and whether a document follows the first (``first``: that
    one read alone, as go-yaml's Unmarshal reads it; else a second is ``error``)."""
    if len(text) > MAX_TEXT:
        raise error(f"{what}: larger than {MAX_TEXT // (1024 * 1024)} MiB; not read")
    loader: _Loader | None = None
    try:
        # (refuses unprintable characters already here; libyaml for CDI's specs alone,
        # whose messages no stack or config test pins)
        loader = (_CLoader if v2 and _LIBYAML else _Loader)(text, v2)
        more = False
        try:
            node, more = _first_node(loader) if first else (loader.get_single_node(), False)
        except RecursionError:
            raise error(f"{what}: nested too deeply to read (more than {MAX_DEPTH} "
                        "levels)") from None
        except _TooMany as e:
            raise error(_too_many(what, e.line)) from None
        except Directive as e:
            raise error(f"{what}: the directive {e.text!r} at line {e.line}: {e.why}; "
                        "remove it") from None
        if node is None:
            return None, {}, more
        lines: Lines = {}
        _check_tree(node, what, error, lines, loader, docker)
        if docker:
            two_readings(node, loader.plain, what, error)
        if sole:
            refuse_leading_zeros(node, what, error)
        return loader.construct_document(node), lines, more
    except yaml.YAMLError as e:
        if v2:
            raise error(f"{what}: not valid {fmt}{_why_not_valid(e, text, docker, v2)}") from e
        raise error(not_valid_at(e, text, what, fmt, docker)) from e
    finally:
        if loader is not None:
            loader.dispose()


def _first_node(loader: _Loader) -> tuple[yaml.Node | None, bool]:
    """The stream's first document (None: no document), and whether another follows.
    Past the first, go-yaml's Unmarshal parses nothing: a fault there is only "more"."""
    loader.get_event()  # type: ignore[no-untyped-call]  # (the stream's start)
    if loader.check_event(yaml.StreamEndEvent):
        return None, False
    node = loader.compose_document()
    try:
        return node, not loader.check_event(yaml.StreamEndEvent)
    except (yaml.YAMLError, Directive):  # (a directive of a document never read)
        return node, True


# The line breaks of YAML 1.1 as PyYAML's reader and libyaml count them: a mark's line
# is one of these (str.splitlines breaks at \v, \f and others too; split("\n") at one).
_BREAK = re.compile(r"\r\n|[\r\n\x85\u2028\u2029]")


def _lines(text: str) -> list[str]:
    """``text`` in the lines a parser's marks count (at least one, maybe empty)."""
    return _BREAK.split(text)


def _why_not_valid(e: yaml.YAMLError, text: str, docker: bool, v2: bool = False) -> str:
    """`` at line N: `` and PyYAML's words, or ours where they name no line or fix.
    ``v2`` (CDI's specs, libyaml's parser where there is one): ``_at_column``."""
    if isinstance(e, yaml.reader.ReaderError):  # it names the offset alone
        before = _lines(text[:e.position])
        line = len(before)
        column = f", column {len(before[-1]) + 1}" if v2 else ""
        code = e.character if isinstance(e.character, int) else ord(e.character)
        shown = _snippet(text, line - 1, len(before[-1])) if v2 else ""
        return (f" at line {line}{column}: the character #x{code:04x} is not allowed in YAML "
                "text; remove it, or write it escaped in a double-quoted string (\"\\x07\")"
                f"{shown}")
    mark = getattr(e, "problem_mark", None)
    if mark is None:
        return f": {e}"
    at = f" at line {mark.line + 1}" + (f", column {mark.column + 1}" if v2 else "")
    if "expected a single document" in str(getattr(e, "context", "")):
        who = "docker stack deploy reads only the first and drops the others unread" \
            if docker else "swarmgpu reads one document a file"
        return f"{at}: a second document (---); {who}: remove the others"
    if v2:
        return _at_column(e, mark, text)
    if "'\\t'" in str(getattr(e, "problem", "")):
        return (f"{at}, column {mark.column + 1}: a tab where YAML wants spaces (as "
                "indentation, or after 'key:', where docker's reader takes one and PyYAML "
                "does not); write spaces")
    return f"{at}: {e}"


def not_valid_at(e: yaml.YAMLError, text: str, what: str, fmt: str, docker: bool) -> str:
    """``WHAT:LINE:COL: not valid FMT: PROBLEM`` on one line (an editor's and a log's
    form; ``what`` ends in the file's path where there is one), PyYAML's problem words
    kept (``problem_text``) and a fix (``yamlhints``): its own message was five lines."""
    words = _why_not_valid(e, text, docker).partition(": ")[2]  # " at line L: WORDS"
    mark = getattr(e, "problem_mark", None)
    if isinstance(e, yaml.reader.ReaderError):
        before = _lines(text[:e.position])
        line, column = len(before), len(before[-1]) + 1
    elif mark is not None:
        line, column = mark.line + 1, mark.column + 1
        if words == str(e):  # PyYAML's own words: one line of them, and the fix
            words = problem_text(e, mark, text)
            words += f"; {syntax_hint(words)}"
    else:
        return f"{what}: not valid {fmt}: {' '.join(str(e).split())}"
    return f"{what}:{line}:{column}: not valid {fmt}: {words}"


def _at_column(e: yaml.YAMLError, mark: Any, text: str) -> str:
    """`` at line L, column C: `` and the problem on one line, and what the parser was in
    (``while parsing a flow node``) with where it began: the same whichever parser found
    it (libyaml's marks have no snippet, PyYAML's words a few problems otherwise)."""
    at = f" at line {mark.line + 1}, column {mark.column + 1}"
    lines = _lines(text)
    if mark.line < len(lines) and lines[mark.line][mark.column:mark.column + 1] == "\t":
        return f"{at}: a tab where YAML wants spaces (as indentation); write spaces"
    return f"{at}: {problem_text(e, mark, text)}"


def problem_text(e: yaml.YAMLError, mark: Any, text: str) -> str:
    """The parser's problem on one line, what it was in (``while parsing a flow node``)
    with where that began, and ``_snippet``."""
    said = " ".join(str(getattr(e, "problem", None) or e).split())
    if context := getattr(e, "context", None):
        began = getattr(e, "context_mark", None)
        where = (f" from line {began.line + 1}, column {began.column + 1}"
                 if began is not None and (began.line, began.column) != (mark.line, mark.column)
                 else "")
        said += f" ({' '.join(str(context).split())}{where})"
    return f"{said}{_snippet(text, mark.line, mark.column)}"


SNIPPET = 48  # characters of the line at fault a one-line message shows


def _snippet(text: str, line: int, column: int) -> str:
    """``; the line: '...'``: the 0-based ``line`` of ``text`` as ``repr`` shows it (a
    tab or control character escaped), at most ``SNIPPET`` characters of it around the
    0-based ``column``, ``...`` where cut; the empty text for a blank line or one past
    the last. Lines as the parser's marks count them (``_BREAK``): by "\n" alone, a
    file of other breaks showed another line, or none."""
    start = 0
    for _ in range(line):  # (a line's start found without splitting megabytes)
        brk = _BREAK.search(text, start)
        if brk is None:
            return ""
        start = brk.end()
    brk = _BREAK.search(text, start)
    end = len(text) if brk is None else brk.start()
    if end - start > SNIPPET:
        cut = min(max(start, start + column - SNIPPET + 16), end - SNIPPET)
        shown = ("..." if cut > start else "") + text[cut:cut + SNIPPET] + \
            ("..." if cut + SNIPPET < end else "")
    else:
        shown = text[start:end]
    return f"; the line: {shown!r}" if shown.strip() else ""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_tree(root: yaml.Node, what: str, error: type[Exception], lines: Lines,
                loader: _Loader, docker: bool = False) -> None:
    """Refuse what would blow up once built, or could not be; record every key's line.
    Iterative (the depth is checked, not left to Python's stack) and linear in the
    distinct nodes: an alias is a second reference to a node already composed, whose
    expanded size is known once (``sizes``)."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    # (node, depth, path or None for a node reached again through an alias)
    stack: list[tuple[yaml.Node, int, tuple[Any, ...] | None, bool]] = [(root, 0, (), False)]
    while stack:
        node, depth, path, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            size = 1 + sum(sizes[id(c)] for c in _children(node))
            if size > MAX_NODES:
                raise error(_too_many(what, node.start_mark.line + 1))
            sizes[key] = size
            continue
        if key in open_:
            raise error(f"{what}: an alias at line {node.start_mark.line + 1} refers to a "
                        "node that contains it (a recursive alias); not read")
        if key in sizes:
            continue  # an alias of a node already checked: its size is known
        if depth > MAX_DEPTH:
            raise error(f"{what}: nested more than {MAX_DEPTH} levels deep at line "
                        f"{node.start_mark.line + 1}; not read")
        open_.add(key)
        stack.append((node, depth, path, True))
        check_tag(node, loader.bare, what, error, docker)
        if isinstance(node, yaml.ScalarNode):
            if docker and node.tag == goscalar.TIMESTAMP:
                refuse_timestamp(node, what, error)
            scalar(loader, node, what, error)
        elif isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            read: dict[Any, tuple[yaml.ScalarNode, Any]] = {}  # key_once_read
            merged: int | None = None  # the line of this mapping's ``<<``
            for k, v in node.value:
                sub: tuple[Any, ...] | None = None
                if isinstance(k, yaml.ScalarNode) and k.tag == "tag:yaml.org,2002:merge":
                    merged = merge_once(k, merged, what, error)
                    if docker:
                        merge_after_keys(k, v, seen, what, error)
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    check_tag(k, loader.bare, what, error, docker)  # before scalar reads it
                    line = k.start_mark.line + 1
                    if (k.tag, k.value) in seen:
                        raise error(f"{what}: key {k.value!r} given twice in one mapping "
                                    f"(lines {seen[k.tag, k.value]} and {line}); keep one")
                    seen[k.tag, k.value] = line
                    key = scalar(loader, k, what, error)
                    key_once_read(k, key, read, what, error, loader.v2)
                    if path is not None:
                        sub = (*path, k.value)
                        lines.setdefault(sub, line)
                        if not isinstance(key, str):
                            # Messages name such a key as read (007 is 7): its line too.
                            lines.setdefault((*path, str(key)), line)
                stack.append((v, depth + 1, sub, False))
                stack.append((k, depth + 1, None, False))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                stack.append((item, depth + 1, None if path is None else (*path, i), False))
