# Two entry points for a fresh machine:
#   make demo   set up, then train -> translate -> evaluate on Multi30k (quick mode, ~10 minutes on 2 cores)
#   make test   set up, then lint (ruff check, ruff format --check) and run the test suite; on a CPU
#               where `precision: auto` is bf16, run again the tests that depend on that choice,
#               as a CPU without bf16 instructions would (MTKIT_NO_BF16=1)
VENV ?= .venv
PYTHON ?= python3
TORCH ?= torch==2.13.0
DATA ?= $(abspath $(wildcard ../shared/data/multi30k))
DEMO_OUT ?= runs/demo
AUTO_LOG := $(abspath $(VENV))/auto-precision.log
AUTO_ON_THIS_CPU := import torch; from mtkit.core.device import resolve_precision; print(resolve_precision("auto", torch.device("cpu")))

.PHONY: setup test demo clean browser office postgres

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet "$(TORCH)"
	$(VENV)/bin/pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	rm -f $(AUTO_LOG)
	MTKIT_AUTO_PRECISION_LOG=$(AUTO_LOG) $(VENV)/bin/python -m pytest -q -n auto --dist worksteal --durations=20
	@if [ "$$($(VENV)/bin/python -c '$(AUTO_ON_THIS_CPU)')" = bf16 ]; then \
		echo "make test: precision auto is bf16 on this CPU; the tests that resolved it, again as on a CPU without bf16 (MTKIT_NO_BF16=1):"; \
		MTKIT_NO_BF16=1 $(VENV)/bin/python -m pytest -q -n auto --dist worksteal --durations=20 --only-precision-dependent=$(AUTO_LOG); \
	else \
		echo "make test: precision auto is fp32 on this CPU (no bf16 instructions, or MTKIT_NO_BF16=1): one pass covers it"; \
	fi

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

# LibreOffice (headless) and gettext, which read the translated documents in their tests (they skip,
# saying so, without them).
office:
	@if command -v soffice >/dev/null && command -v msgfmt >/dev/null && command -v pdftotext >/dev/null \
		&& [ -e /usr/lib/libreoffice/program/libsclo.so ]; then \
		echo "office: LibreOffice, gettext and poppler are installed"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			libreoffice-writer-nogui libreoffice-impress-nogui libreoffice-calc-nogui gettext poppler-utils >/dev/null \
		&& echo "office: installed LibreOffice, gettext and poppler"; \
	else \
		echo "office: not installed (run: sudo apt-get install libreoffice-writer-nogui libreoffice-impress-nogui libreoffice-calc-nogui gettext poppler-utils); those tests will skip"; \
	fi

# PostgreSQL's server, which the tests of state shared between servers start and stop themselves (they
# skip, saying so, without it).
postgres:
	@if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null; then \
		echo "postgres: PostgreSQL is installed"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null \
		&& echo "postgres: installed PostgreSQL"; \
	else \
		echo "postgres: not installed (run: sudo apt-get install postgresql); the shared-state tests will skip"; \
	fi

demo: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" DATA="$(DATA)" recipes/multi30k_en_de/run.sh --quick --out $(DEMO_OUT)

clean:
	rm -rf $(VENV) runs
