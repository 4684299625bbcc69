"""YAML suite files parsed in bounded time and memory, and without silent overrides.

`yaml.safe_load` constructs no objects from tags, but it still expands aliases (nine
levels of nine aliases is 9^9 nodes to whoever walks the result: gigabytes for the schema
check), recurses once per nesting level (20,000 levels: a RecursionError) and keeps the
last of two equal keys in a mapping. This loader refuses all three while composing, with
the position of the offending node, before anything walks the document."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode

YAMLError = yaml.YAMLError  # what load() raises, from the same yaml module it uses

MAX_DEPTH = 100  # nesting levels; a suite file needs a handful
MAX_NODES = 100_000  # nodes of the document with every alias expanded


class BoundedSafeLoader(yaml.SafeLoader):
    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(collection node) -> its size, aliases expanded

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            return super().compose_node(parent, index)
        event = self.peek_event()  # type: ignore[no-untyped-call]
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, (SequenceNode, MappingNode)):
            children = node.value if isinstance(node, SequenceNode) else [n for pair in node.value for n in pair]
            size = 1 + sum(self._sizes.get(id(child), 1) for child in children)
            if size > MAX_NODES:
                raise ComposerError(None, None, f"aliases expand the document beyond {MAX_NODES:,} nodes",
                                    event.start_mark)
            self._sizes[id(node)] = size
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A key given twice in one mapping is an error (a merge key `<<` may be
        overridden, as YAML intends)."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=False)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the constructor reports it
                continue
            if duplicate:
                raise ConstructorError("while constructing a mapping", node.start_mark,
                                       f"found duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load(text: str) -> Any:
    return yaml.load(text, Loader=BoundedSafeLoader)  # noqa: S506 - a SafeLoader subclass
