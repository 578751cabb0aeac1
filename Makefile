# Two entry points for a fresh machine:
#   make demo   set up, then train -> translate -> evaluate on Multi30k (quick mode, ~10 minutes on 2 cores)
#   make test   set up, then lint (ruff check, ruff format --check) and run the test suite
VENV ?= .venv
PYTHON ?= python3
TORCH ?= torch==2.13.0
DATA ?= $(abspath $(wildcard ../shared/data/multi30k))
DEMO_OUT ?= runs/demo

.PHONY: setup test demo clean browser

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet "$(TORCH)"
	$(VENV)/bin/pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/python -m pytest -q -n auto

# Headless Chromium and its driver, for the serve page's browser tests (which skip, saying so, without them):
# Debian's packages where this runs as root, else the line to run.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
		echo "browser: chromium and chromedriver are installed"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null \
		&& echo "browser: installed chromium and chromium-driver"; \
	else \
		echo "browser: not installed (run: sudo apt-get install chromium chromium-driver); the page's tests will skip"; \
	fi

demo: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" DATA="$(DATA)" recipes/multi30k_en_de/run.sh --quick --out $(DEMO_OUT)

clean:
	rm -rf $(VENV) runs
