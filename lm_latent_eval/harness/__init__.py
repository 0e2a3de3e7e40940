"""The lm-eval side: backends (``backends``), per-document result store (``results_store``), start-up hook (``hook``)."""
