"""What a user types into ``acpctl search`` (or the console's search box), made into each
backend's full-text query. The language is small on purpose, the same on both backends:
words (all must match, case- and accent-insensitive), ``"a phrase"``, and ``word*`` for a
prefix. Nothing the user types reaches the SQL text: every term is a bound parameter."""

from __future__ import annotations

import re
from dataclasses import dataclass

from state_machines import ControlPlaneError

_TERM = re.compile(r'"([^"]*)"|(\S+)')
_WORD = re.compile(r"\w+", re.UNICODE)


class SearchQueryError(ControlPlaneError, ValueError):
    """A search query with nothing to look for (no word in it)."""


@dataclass(frozen=True)
class Term:
    words: tuple[str, ...]  # one word, or a phrase's words in order
    prefix: bool = False  # the last word is a prefix
    source: str = ""  # as typed (without quotes or the prefix's *): PostgreSQL parses it


@dataclass(frozen=True)
class SearchQuery:
    text: str
    terms: tuple[Term, ...]

    @classmethod
    def parse(cls, text: str) -> SearchQuery:
        terms: list[Term] = []
        for phrase, bare in _TERM.findall(text):
            source = phrase if phrase else bare
            words = tuple(w.lower() for w in _WORD.findall(source))
            if words:
                prefix = not phrase and bare.endswith("*")
                terms.append(Term(words, prefix, source.rstrip("*") if prefix else source))
        if not terms:
            raise SearchQueryError(
                f'nothing to search for in {text!r}: give words, a "phrase" or a prefix*'
            )
        return cls(text, tuple(terms))

    def fts5(self) -> str:
        """An FTS5 MATCH expression: each term a quoted string (its words a phrase), ANDed.
        Words come from ``\\w+``, so no quote or operator can be in them."""
        return " ".join(
            '"' + " ".join(t.words) + '"' + ("*" if t.prefix else "") for t in self.terms
        )

    def pg_terms(self) -> list[tuple[str, str]]:
        r"""Each term for PostgreSQL, ANDed by the caller: ``("phrase", text)`` for
        ``phraseto_tsquery`` (PostgreSQL's own parser reads the text as the index's did, so
        ``main.py``, one word to it, matches), ``("query", text)`` for ``to_tsquery``: a
        prefix, its words quoted and joined by ``<->``, the last marked ``:*`` (made of
        ``\w+`` words only, so nothing in it is an operator the user wrote)."""
        out = []
        for t in self.terms:
            if t.prefix:
                words = [f"'{w}'" for w in t.words]
                out.append(("query", " <-> ".join(words) + ":*"))
            else:
                out.append(("phrase", t.source))
        return out

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(w for t in self.terms for w in t.words)
