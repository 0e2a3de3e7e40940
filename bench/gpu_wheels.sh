#!/bin/bash
# The Python packages a device machine lacks, as wheels in .whl/ (git-ignored), at the versions this checkout's
# environment runs: its image holds torch, transformers and accelerate but not lm-eval, evaluate, datasets and their
# small dependencies (the device README's package list) nor pytest-xdist (the suite step), and nothing can be fetched
# there. Run here, once a session is lent a GPU, before the device call (about a minute, 37 wheels, about 21 MiB of
# the 64 MiB a call carries):
#
#   bash bench/gpu_wheels.sh
#
# then name .whl in the call's carry and begin its command with
#
#   python3 -m pip install -q --no-index --no-deps --no-compile .whl/*.whl || exit;
#
# (into the image's own site-packages, as root: the lm-eval hook of this checkout's wheel, lm_latent_eval_hook.pth,
# runs only from a site directory; `PYTHONPATH=$PWD`, which bench/gpu_session.sh sets, then puts the checkout's own
# code before the wheel's). A package with a wheel for CPython 3.12 on x86-64 Linux is downloaded as it; one
# published as source only, and this checkout, are built here (pure Python).
set -eu
PY=${PY:-.venv/bin/python}
PACKAGES="DataProperty annotated-types arviz chardet datasets defusedxml dill evaluate h5netcdf httpcore2 httpx2
lm_eval mbstrdecoder more-itertools multiprocess nltk pathvalidate platformdirs pydantic pydantic_core pytablewriter
pytz rouge_score sqlitedict tabledata tcolorpy truststore typepy typing-inspection word2number xarray-einstats
pytest pytest-xdist execnet iniconfig pluggy"
mkdir -p .whl
for name in $PACKAGES; do
  version=$($PY -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl "$name==$version" 2>/dev/null \
    || $PY -m pip wheel -q --no-deps -w .whl "$name==$version"
done
rm -f .whl/lm_latent_eval-*.whl
$PY -m pip wheel -q --no-deps -w .whl .
ls .whl | wc -l; du -sh .whl
