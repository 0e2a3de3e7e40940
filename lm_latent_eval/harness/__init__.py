"""The lm-eval side: backends (``backends``), per-document result store (``results_store``), start-up hook (``hook``).

Kept import-free: the start-up hook imports ``lm_latent_eval.harness.hook`` at every interpreter start.
"""
