# iadeep — see README.md. Two commands matter: `make experiment` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Offline machines: a local mirror laid out like the upstream data (see docs/datasets.md).
# Defaults to ../shared/data when that folder exists, otherwise the upstream hosts are used.
IADEEP_DATASET_MIRROR ?= $(wildcard $(abspath $(CURDIR)/../shared/data))
export IADEEP_DATASET_MIRROR

# Two installs into the same venv, each with its stamp: the light one (the simulator, the
# experiments, the CLI and the report: [project].dependencies) for `make experiment`, and the full
# one (the services, Airflow, the training workloads and the test tools on top) for everything else;
# `make test` after `make experiment` adds what the light one left out.
LIGHT_STAMP := $(VENV)/.installed-light
STAMP       := $(VENV)/.installed
FULL_EXTRAS := airflow,services,test,workloads,docs

.PHONY: venv experiment test docs bench results mutation lock lint clean controlplane node images stack-images airflow helm

venv: $(STAMP)

$(LIGHT_STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e . -c constraints.txt
	touch $(LIGHT_STAMP)

$(STAMP): $(LIGHT_STAMP) pyproject.toml constraints.txt iadeep/deviceplugin/v1beta1/api.proto
	$(BIN)/python -m pip install -q -e '.[$(FULL_EXTRAS)]' -c constraints.txt
	$(BIN)/python -c "from iadeep.deviceplugin._proto import PACKAGE_ROOT, generate; generate(PACKAGE_ROOT)"  # kubelet API stubs (grpcio-tools; not committed)
	touch $(STAMP)

# The main job on the light install (docs/performance-install.md: its size and time). EXTRAS adds
# optional groups of pyproject.toml for the run, e.g. `make experiment EXTRAS=services ARGS="--backend kubernetes"`.
experiment: $(LIGHT_STAMP)
	$(if $(EXTRAS),$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]' -c constraints.txt)
	$(BIN)/iadeep experiment run $(ARGS)

# Airflow 3 (`airflow standalone`: UI + API, scheduler, dag-processor, triggerer; SQLite) with the
# DAGs in dags/ on 127.0.0.1; prints the URL and the generated admin password; Ctrl-C stops it.
# AIRFLOW_HOME defaults to ./.airflow, the port to 8080 (IADEEP_AIRFLOW_PORT; a free one when taken).
airflow: $(STAMP)
	$(BIN)/python -m iadeep.orchestration

# The suite runs on two pytest-xdist workers, one test folder to a worker (tests/conftest.py):
# 16 min instead of 24 on the 2-core machine. TEST_WORKERS=0 runs it in this process, one test
# after the other (docs/testing.md).
TEST_WORKERS ?= 2
test: $(STAMP) controlplane node images stack-images helm
	$(BIN)/lint-imports --no-cache
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --hypothesis-profile=ci $(PYTEST_ARGS)

# The documentation site into site/ (strict: a dead link or anchor, or a renamed option or setting, fails).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# benchmarks/startup.py: start-up and output as ratios, the full trace as CPU seconds and callgrind
# instructions per job beside the previous commit's (STARTUP_ARGS, e.g. --baseline REF, --skip-callgrind).
bench: $(STAMP) controlplane
	$(BIN)/python benchmarks/run.py $(ARGS)
	$(BIN)/python benchmarks/openb.py
	$(BIN)/python benchmarks/extender.py
	$(BIN)/python benchmarks/tuner.py
	$(BIN)/python benchmarks/live.py
	$(BIN)/python benchmarks/timings.py
	$(BIN)/python benchmarks/startup.py $(STARTUP_ARGS)

# The result tables of README.md and docs/results.md (main job, sweep, guard figures, draw) from fresh runs
# (about 27 min on a 2-core machine).
results: $(STAMP)
	$(BIN)/python tools/results.py $(ARGS)

# Mutation checks of the core (not in CI: slow). First the deliberate bugs a review found the tests
# blind to (each must fail a core test), then mutmut over iadeep/policy, iadeep/sim, iadeep/goodput.py.
mutation: $(STAMP)
	$(BIN)/python tools/mutation/deliberate_bugs.py
	$(BIN)/python -m pip install -q mutmut==3.8.1 -c constraints.txt
	$(BIN)/mutmut run || true
	$(BIN)/mutmut results

# Regenerate the pinned set from pyproject.toml (starting from the set known to install together).
lock:
	rm -rf .lockvenv && $(PYTHON) -m venv .lockvenv
	.lockvenv/bin/pip install -q --upgrade pip
	.lockvenv/bin/pip install -q -e '.[$(FULL_EXTRAS)]' -c ../shared/reference/known-good-constraints.txt
	.lockvenv/bin/pip freeze --exclude-editable | grep -v '^-e' > constraints.txt
	rm -rf .lockvenv

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# kube-apiserver, kube-scheduler, kube-controller-manager, kwok and etcd from Go modules (tools/controlplane),
# into ~/.cache/iadeep/controlplane/<pins>; skipped when already built for the same pins.
controlplane:
	bash tools/controlplane/build.sh

# Helm (helm.sh/helm/v4/cmd/helm, pinned in tools/helm/go.mod) from Go modules into
# ~/.cache/iadeep/helm/<version>-<pins>; skipped when already built (charts/iadeep, tests/helm).
helm:
	bash tools/helm/build.sh

# The local real node: kubelet from the same pins (tools/controlplane/go.mod), the
# pod-sandbox `pause`, and Debian's runc/containerd/loopback CNI/buildah/debootstrap (installed
# with apt-get when missing) into ~/.cache/iadeep/node/<pins>; skipped when already built.
node:
	bash tools/node/build.sh

# The services' images (images/*/Dockerfile) built without registry or daemon (debootstrap +
# buildah), as one OCI archive in ~/.cache/iadeep/images/builds/<content-hash>; skipped when the
# source tree is unchanged. Needs root (chroot isolation); `make node` first for its packages.
images: node
	bash tools/images/build.sh

# The local Airflow stack's images (tools/images/stack.sh: Airflow, Postgres, etcd for
# docker-compose.yaml under podman; tests/compose/test_compose_stack.py brings the stack up),
# on the base image and Debian root filesystem of `images`, in the same buildah storage;
# skipped when the source tree is unchanged.
stack-images: images
	bash tools/images/stack.sh
