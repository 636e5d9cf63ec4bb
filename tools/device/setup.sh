# Source this on the GPU machine (repo root): `source tools/device/setup.sh`.
# That machine has no package registry: hatchling comes from the carried `.whl` folder
# (see docs/developing.md), then every local package is installed editable so the
# `genesis.backends` entry points are registered.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for dist in genesis-core genesis-nn genesis-llm genesis-distributed genesis-cuda; do
    if [ -f "packages/$dist/pyproject.toml" ]; then
        python3 -m pip install -q --no-deps --no-build-isolation --no-index -e "packages/$dist" \
            || return 1
    fi
done
