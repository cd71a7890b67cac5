"""YAML read with bounds, for files a vendor hands us (profiles, the manifests they name): never a hang or a traceback.

PyYAML composes aliases as shared nodes, so a 400-byte "billion laughs" document is a small graph that any walk
over its tree (schema validation, looking for duplicate keys, JSON for the API server) expands exponentially. Here
the tree's size is counted once per distinct node (memoized, so linear in the graph), and a document whose tree
would be larger than its bound, nest deeper than MAX_DEPTH or refer to itself is refused before anything walks it.

Every problem is a BoundedYamlError carrying the line it was found at and a one-line problem.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

# A profile is a few KiB; the largest file one names (a rendered chart) a few hundred KiB. Reading stops here.
MAX_FILE_BYTES = 4 * 1024 * 1024
# Nodes of a profile's tree with every alias expanded: the shipped files have at most 900 per document, and the
# profile's schema validation takes about 13 us a node on one core, so this many take a quarter of a second.
MAX_PROFILE_NODES = 20_000
# Nodes of one manifest (a CRD's schema runs to tens of thousands); only its top keys are read here, but the
# backend sends it whole to the API server, as JSON.
MAX_MANIFEST_NODES = 500_000
# Nesting of mappings and sequences; PyYAML composes recursively (three frames a level), so far deeper documents
# would end in a RecursionError instead of a line.
MAX_DEPTH = 100


class BoundedYamlError(ValueError):
    """A YAML file that cannot be read within the bounds: `line` (1-based) and a one-line `problem`."""

    def __init__(self, line: int, problem: str) -> None:
        """Locate the problem."""
        super().__init__(f"line {line}: {problem}")
        self.line = line
        self.problem = problem


def _syntax_problem(error: yaml.YAMLError, text: str) -> tuple[int, str]:
    """(line, problem) of a YAML syntax error."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        context = error.context or ""
        if context and error.context_mark is not None:
            context += f" (line {error.context_mark.line + 1})"
        return error.problem_mark.line + 1, ": ".join(part for part in (context, error.problem or "") if part)
    if isinstance(error, yaml.reader.ReaderError):
        return text[: error.position].count("\n") + 1, f"{error.reason} (#x{error.character:04x})"
    return 1, " ".join(str(error).split())


def decode(content: bytes) -> str:
    """The file's text; too large or not UTF-8 is a BoundedYamlError."""
    if len(content) > MAX_FILE_BYTES:
        raise BoundedYamlError(1, f"{len(content)} bytes, more than the {MAX_FILE_BYTES} a file may have")
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BoundedYamlError(content[: error.start].count(b"\n") + 1, f"not UTF-8 text: {error.reason}") from None


def check_tree(root: yaml.Node, max_nodes: int) -> None:
    """Refuse a composed document whose tree, aliases expanded, is too large, too deep or cyclic.

    Iterative and memoized per node: linear in the number of distinct nodes however the aliases nest.
    """
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    on_path: set[int] = set()
    # (node, children pushed yet)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if expanded:
            on_path.discard(key)
            children = list(_children(node))
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            depths[key] = 1 + max((depths[id(child)] for child in children), default=0)
            if sizes[key] > max_nodes:
                raise BoundedYamlError(
                    node.start_mark.line + 1,
                    f"more than {max_nodes} nodes once its aliases are expanded (an alias bomb?)",
                )
            if depths[key] > MAX_DEPTH:
                raise BoundedYamlError(node.start_mark.line + 1, f"nested more than {MAX_DEPTH} levels deep")
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise BoundedYamlError(node.start_mark.line + 1, "an alias refers to a node that contains it")
        if len(on_path) > MAX_DEPTH:
            raise BoundedYamlError(node.start_mark.line + 1, f"nested more than {MAX_DEPTH} levels deep")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value
    elif isinstance(node, yaml.SequenceNode):
        yield from node.value


@dataclass(frozen=True)
class Composed:
    """One document: its root node (None if empty) and the data built from it."""

    root: yaml.Node | None
    data: Any


def _construct(loader: yaml.SafeLoader, root: yaml.Node) -> Any:
    try:
        return loader.construct_document(root)
    except yaml.YAMLError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError) as error:
        # SafeConstructor's own conversions: a timestamp such as 2001-13-45, an int of more digits than Python
        # converts, ...
        raise BoundedYamlError(root.start_mark.line + 1, f"a value cannot be read: {error}") from None


def _composed(text: str, *, single: bool, max_nodes: int) -> Iterator[Composed]:
    try:
        loader = yaml.SafeLoader(text)  # checks the characters: a ReaderError already
    except yaml.YAMLError as error:
        line, problem = _syntax_problem(error, text)
        raise BoundedYamlError(line, f"not valid YAML: {problem}") from None
    try:
        if single:
            root = loader.get_single_node()
            if root is not None:
                check_tree(root, max_nodes)
            yield Composed(root, _construct(loader, root) if root is not None else None)
            return
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            check_tree(node, max_nodes)
            yield Composed(node, _construct(loader, node))
    except yaml.YAMLError as error:
        line, problem = _syntax_problem(error, text)
        raise BoundedYamlError(line, f"not valid YAML: {problem}") from None
    except RecursionError:
        raise BoundedYamlError(1, f"nested more than {MAX_DEPTH} levels deep") from None
    finally:
        loader.dispose()


def compose_one(text: str) -> Composed:
    """The single document of `text` (root None if empty), within the bounds."""
    return next(_composed(text, single=True, max_nodes=MAX_PROFILE_NODES))


def load_all(text: str) -> list[Any]:
    """The data of every document of `text` (a manifest file), within the bounds."""
    return [document.data for document in _composed(text, single=False, max_nodes=MAX_MANIFEST_NODES)]
