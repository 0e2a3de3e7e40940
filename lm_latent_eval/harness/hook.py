"""Start-up hook (run by ``lm_latent_eval_hook.pth``): add our backends to lm-eval's model registry when it loads.

It is needed only for lm-eval releases without plugin discovery (0.4.13 and the 0.5 preview): upstream has merged,
not yet released, discovery through the ``lm_eval.models`` entry-point group (PR #4013), where pyproject declares the
same names (``tests/harness/test_lm_eval_versions.py`` loads them as that discovery does); where lm-eval discovers
them, the hook registers no name twice. Once the lowest supported release discovers them, this module, the .pth file
and pyproject's force-include of them go.

The wheel installs this file at site-packages root as ``_lm_latent_eval_hook`` (pyproject's force-include moves
it there), so that interpreter start-up imports that one module and not the ``lm_latent_eval`` package: a checkout
on ``sys.path`` is never shadowed by the installed copy. It therefore imports nothing relative.

``lm_eval --model latent_hmm`` can only find us if our names are in ``lm_eval.api.registry.model_registry`` before
the CLI looks them up. At interpreter start this module only puts one finder on ``sys.meta_path`` (no torch, no
lm-eval, no lm_latent_eval import). When ``lm_eval.api.registry`` is first imported, the finder lets it load
normally, then imports ``lm_eval.models`` (so the built-in models are registered first: ``get_model`` only imports
them while the registry is empty) and registers our names as lazy ``"module:Class"`` placeholders; lm-eval imports
the class when the name is first asked for.

One source of registration: the names and targets come from the one model table, ``lm_latent_eval.models.MODELS``
(a dict of strings, no torch), read at registration time only (``backend_targets``). ``harness/backends.py`` builds
each ``latent_<name>`` class from the same table and registers the same targets when it is imported; pyproject's
entry points list them too, and a test checks that they agree.
"""

import sys

BACKENDS_MODULE = "lm_latent_eval.harness.backends"
REGISTRY_MODULE = "lm_eval.api.registry"


def backend_targets() -> dict:
    """lm-eval model name -> ``"module:Class"``: ``latent`` and ``latent_<name>`` for every row of MODELS with a
    backend (pyproject's ``lm_eval.models`` entry points list the same; a test checks it)."""
    # imported here, not at the top: at interpreter start this module imports nothing of the package
    from lm_latent_eval.models import MODELS

    targets = {"latent": f"{BACKENDS_MODULE}:LatentLMEval"}
    targets.update(
        {
            f"latent_{name}": f"{BACKENDS_MODULE}:{entry.backend}"
            for name, entry in MODELS.items()
            if entry.backend is not None
        }
    )
    return targets


def register_backends(registry) -> None:
    """Register our backends in ``registry.model_registry`` after lm-eval's built-ins; never replace a name."""
    # imported only now (lm-eval's registry is loading): registers the built-in placeholders before ours
    import lm_eval.models  # noqa: F401

    for name, target in backend_targets().items():
        if name not in registry.model_registry:
            registry.model_registry.register(name, target=target)


def _register_or_warn(registry) -> None:
    """``register_backends``, with a warning instead of an error: a broken hook must never break lm-eval itself."""
    try:
        register_backends(registry)
    except Exception as err:  # noqa: BLE001
        # imported only on this rare path: start-up stays cheap
        import warnings

        warnings.warn(
            f"lm-latent-eval could not register its lm-eval backends: {err!r}",
            stacklevel=2,
        )


class _RegisterAfterExec:
    """Loader wrapper: run the real loader, then register our backends in the freshly executed registry module."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _register_or_warn(module)

    def __getattr__(self, name):
        return getattr(self.loader, name)


def _is_registry_finder(finder) -> bool:
    """By name, not class: the installed ``_lm_latent_eval_hook`` and ``lm_latent_eval.harness.hook`` are two copies."""
    return type(finder).__name__ == "RegistryImportFinder"


class RegistryImportFinder:
    """Meta-path finder that answers only for ``lm_eval.api.registry``, by wrapping the spec the other finders find."""

    def find_spec(self, fullname, path, target=None):
        if fullname != REGISTRY_MODULE:
            return None
        for finder in sys.meta_path:
            # also a second copy of this finder (installed hook + checkout): asking it would recurse
            if _is_registry_finder(finder) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _RegisterAfterExec(spec.loader)
                return spec
        return None


def install() -> None:
    """Put the finder first on sys.meta_path (once); register at once if lm-eval's registry is already loaded."""
    if REGISTRY_MODULE in sys.modules:
        _register_or_warn(sys.modules[REGISTRY_MODULE])
    elif not any(_is_registry_finder(f) for f in sys.meta_path):
        sys.meta_path.insert(0, RegistryImportFinder())


install()
