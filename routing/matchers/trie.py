"""The trie matcher: a word trie under one lock, as RabbitMQ and ZeroMQ do it.

Structure
---------
Each node represents a pattern prefix. Literal children live in a dict keyed
by the word; the two wildcard children are named fields, ``star`` (the next
word is ``*``) and ``hash`` (the next word is ``#``), never magic dict keys, so
a literal word ``"*"`` or ``"a*"`` can never be confused with a wildcard. The
subscribers of a pattern sit on the node its last word leads to (the root for
the empty pattern).

Lookup
------
Matching walks the trie as a non-deterministic automaton over states
``(node, i)``: "the first ``i`` key words have been consumed and we are at
``node``". From a state:

* if ``i == len(key)``, the node's subscribers match;
* a literal child equal to ``key[i]`` and the ``star`` child go to ``i + 1``;
* the ``hash`` child goes to ``(hash, i)``: ``#`` consuming zero words;
* a node reached through a ``hash`` field may also stay put and consume one
  more word: ``(node, i + 1)``.

Every state is visited at most once (a ``seen`` set), so a lookup costs
O(trie nodes x key words) in the worst case however many ``#`` a pattern has:
15 ``#`` against a 31-word key answers at once instead of backtracking
exponentially. Without ``#`` the walk is the usual backtracking over at most
two branches (literal, ``star``) per level.

Unsubscribe removes the subscriber and prunes nodes left with no subscribers
and no children, bottom up, so the trie never keeps dead branches.

Concurrency: one lock around the whole trie (the seed's global lock); a lookup
walks under the lock.
"""

from __future__ import annotations

import threading

from routing.topic import HASH, STAR, check_subscriber, key_words, pattern_words


class _Node:
    __slots__ = ("children", "hash", "is_hash", "star", "subscribers")

    def __init__(self, is_hash: bool = False) -> None:
        #: Literal next words -> child. Never holds a wildcard meaning.
        self.children: dict[str, _Node] = {}
        #: Child for a ``*`` word, if any pattern continues with ``*``.
        self.star: _Node | None = None
        #: Child for a ``#`` word, if any pattern continues with ``#``.
        self.hash: _Node | None = None
        #: True when this node is some parent's ``hash`` child: it may absorb further key words.
        self.is_hash = is_hash
        #: Subscribers whose pattern ends at this node.
        self.subscribers: set[str] = set()

    def is_empty(self) -> bool:
        return not (self.subscribers or self.children or self.star is not None or self.hash is not None)

    def child(self, word: str) -> _Node | None:
        if word == STAR:
            return self.star
        if word == HASH:
            return self.hash
        return self.children.get(word)

    def add_child(self, word: str) -> _Node:
        existing = self.child(word)
        if existing is not None:
            return existing
        if word == STAR:
            node = self.star = _Node()
        elif word == HASH:
            node = self.hash = _Node(is_hash=True)
        else:
            node = self.children[word] = _Node()
        return node

    def remove_child(self, word: str) -> None:
        if word == STAR:
            self.star = None
        elif word == HASH:
            self.hash = None
        else:
            del self.children[word]


class TrieMatcher:
    def __init__(self) -> None:
        self._root = _Node()
        # Invariant: equals the number of (pattern, subscriber) pairs held in the trie.
        self._count = 0
        self._lock = threading.Lock()

    def subscribe(self, pattern: str, subscriber: str) -> None:
        words = pattern_words(pattern)
        check_subscriber(subscriber)
        with self._lock:
            node = self._root
            for word in words:
                node = node.add_child(word)
            if subscriber not in node.subscribers:
                node.subscribers.add(subscriber)
                self._count += 1

    def unsubscribe(self, pattern: str, subscriber: str) -> None:
        words = pattern_words(pattern)
        check_subscriber(subscriber)
        with self._lock:
            path: list[_Node] = [self._root]
            for word in words:
                child = path[-1].child(word)
                if child is None:
                    return
                path.append(child)
            node = path[-1]
            if subscriber not in node.subscribers:
                return
            node.subscribers.discard(subscriber)
            self._count -= 1
            # Prune bottom up: path[i + 1] is path[i]'s child for words[i].
            for depth in range(len(words) - 1, -1, -1):
                if not path[depth + 1].is_empty():
                    break
                path[depth].remove_child(words[depth])

    def lookup(self, key: str) -> frozenset[str]:
        words = key_words(key)
        n = len(words)
        found: set[str] = set()
        with self._lock:
            seen: set[tuple[int, int]] = set()
            stack: list[tuple[_Node, int]] = [(self._root, 0)]
            while stack:
                node, i = stack.pop()
                state = (id(node), i)
                if state in seen:
                    continue
                seen.add(state)
                if node.hash is not None:
                    stack.append((node.hash, i))
                if i == n:
                    found.update(node.subscribers)
                    continue
                if node.is_hash:
                    stack.append((node, i + 1))
                literal = node.children.get(words[i])
                if literal is not None:
                    stack.append((literal, i + 1))
                if node.star is not None:
                    stack.append((node.star, i + 1))
        return frozenset(found)

    def subscriptions(self) -> frozenset[tuple[str, str]]:
        pairs: list[tuple[str, str]] = []
        with self._lock:
            # A pattern is its path's words joined by '.'; the root is the empty pattern.
            stack: list[tuple[_Node, list[str]]] = [(self._root, [])]
            while stack:
                node, prefix = stack.pop()
                pattern = ".".join(prefix)
                pairs.extend((pattern, s) for s in node.subscribers)
                for word, child in node.children.items():
                    stack.append((child, [*prefix, word]))
                if node.star is not None:
                    stack.append((node.star, [*prefix, STAR]))
                if node.hash is not None:
                    stack.append((node.hash, [*prefix, HASH]))
        return frozenset(pairs)

    def __len__(self) -> int:
        with self._lock:
            return self._count
