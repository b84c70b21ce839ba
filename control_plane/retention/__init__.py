"""Retention: deleting old session trees, archived first when asked (``acpctl gc`` and the
``[retention]`` schedule of serve and batch). docs/store.md, "Retention and archive".

- ``policy``: what may go (age, states, archive directory) and the input checks;
- ``archive``: one verified ``.tar.gz`` per tree, written before anything is deleted;
- ``pacing``: how deletion shares the write lock with live work (short transactions);
- ``deletion``: a claimed tree deleted a transaction at a time;
- ``space``: SQLite's freed pages given back to the file system;
- ``run``: one gc pass, and its report (``report``);
- ``schedule``: the pass repeated in the background of a long-lived process.

Importing this package imports nothing else: the configuration reads ``policy``.
"""
