"""``march backup`` / ``restore`` / ``import-floors``: the file format and its checks, nothing of a
store's own. ``operations`` runs the three jobs through the store contract (``march.store.contract``:
``export`` and the restore writes); ``format`` is the file, ``checks`` what the live commands accept,
``floors`` the sources of import-floors, ``through`` the floors raised through a serving primary,
``report`` what a run says."""
