"""Round-robin between students of the requests waiting for a slot. Pure: no I/O.

Each student has their own line; the queue serves the head of the next student's line in turn,
so one student's burst of 20 requests cannot starve a classmate's single request: the
classmate waits for at most one request of each other waiting student.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from typing import Generic, Hashable, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    def __init__(self) -> None:
        self._lines: OrderedDict[Hashable, deque[T]] = OrderedDict()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, student: Hashable, item: T) -> None:
        self._lines.setdefault(student, deque()).append(item)
        self._size += 1

    def peek(self) -> T | None:
        """The item whose turn it is, without taking it."""
        for line in self._lines.values():
            return line[0]
        return None

    def pop(self) -> T | None:
        """Take the item whose turn it is; that student goes to the back of the round."""
        if not self._lines:
            return None
        student, line = next(iter(self._lines.items()))
        item = line.popleft()
        self._size -= 1
        del self._lines[student]
        if line:
            self._lines[student] = line  # re-inserted last: the next student's turn
        return item

    def take(self, student: Hashable, item: T) -> bool:
        """Take this very item (served out of turn-order after an await): like pop(), its
        student goes to the back of the round."""
        if not self.remove(student, item):
            return False
        line = self._lines.pop(student, None)
        if line:
            self._lines[student] = line
        return True

    def remove(self, student: Hashable, item: T) -> bool:
        """Drop an item that gave up waiting (timeout, client gone)."""
        line = self._lines.get(student)
        if line is None or item not in line:
            return False
        line.remove(item)
        self._size -= 1
        if not line:
            del self._lines[student]
        return True

    def students(self) -> int:
        return len(self._lines)
