"""Store URLs as messages and printed output show them: no password, no query.

A URL's ``user:password@`` and its query (a shared access signature, a token) are
credentials, which messages, reprs and the command line's output leave out; specs and pickles
keep them, to open the data again. Pure string work, below the stores and kvstore JSON.
"""

from __future__ import annotations


def shown_url(value: str) -> str:
    """``value`` as messages and printed output show it: without the ``user:password@`` of a
    URL, and with what follows its path (a query, which may be a signature or a token, or a
    fragment) as ``?…`` or ``#…``. A plain path is shown as it is."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        return value
    cut = min((at for at in (rest.find("?"), rest.find("#")) if at >= 0), default=-1)
    tail = "" if cut < 0 else rest[cut] + "…"
    rest = rest if cut < 0 else rest[:cut]
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}{tail}"
