# Thin wrapper around CMake.  `make`, `make check`, `make demo`, `make bench`.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# The project's own builds treat warnings as errors (PGLOCK_WERROR; a
# plain cmake build does not).
# compile_commands.json is for clang-tidy (make tidy).
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPGLOCK_WERROR=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON

.PHONY: all lint tidy check check-asan check-fast check-ha check-tls check-valgrind check-versions chaos demo bench bench-capacity fuzz install deb check-deb clean

all: $(BUILD)/Makefile
	@cmake --build $(BUILD) -j$(JOBS)

# (Configured again when this file changes, so a build directory made
# before picks up new flags.)
$(BUILD)/Makefile: Makefile
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

$(BUILD_ASAN)/Makefile: Makefile
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DPGLOCK_SANITIZE=ON -DPGLOCK_WERROR=ON >/dev/null

# shellcheck over every shell script and bats file (tests/lint.sh); every
# C file laid out as .clang-format says (tests/lint_format.sh); no
# two files of src/ depending on each other in a circle, read from the
# build's object files (tests/lint_cycles.py); no CLI object using an
# internal of the library's, nor a CLI file a header of src/lib
# (tests/lint_layers.py); no mutable file-scope object in a CLI object
# but the signal plumbing and the output verbosity (tests/lint_state.py);
# no run of six lines repeated to the letter in src/ (tests/lint_copies.py);
# no function of src/ over 100 lines (tests/lint_functions.py).  Every
# check runs, and the lint fails if any does.
lint: all
	@rc=0; tests/lint.sh || rc=1; \
	tests/lint_format.sh || rc=1; \
	tests/lint_cycles.py $(BUILD) || rc=1; \
	tests/lint_layers.py $(BUILD) || rc=1; \
	tests/lint_state.py $(BUILD) || rc=1; \
	tests/lint_copies.py src || rc=1; \
	tests/lint_functions.py src || rc=1; \
	exit $$rc

# clang-tidy over src/ with .clang-tidy's checks, no finding allowed
# (tests/tidy.sh; about 3 minutes on 2 cores, so CI runs it, not make
# lint).
tidy: all
	@tests/tidy.sh $(BUILD)

# The lint, then every test, against throwaway servers the harness starts
# and stops: every test on the normal build, the C tests once more under
# AddressSanitizer + UBSan and once more under valgrind, and the suites
# of the lock connection once more against a TLS primary (TLS_SUITES).
check: lint all $(BUILD_ASAN)/Makefile
	@cmake --build $(BUILD_ASAN) -j$(JOBS)
	@tests/run.sh $(BUILD) c:$(BUILD_ASAN) valgrind:$(BUILD) tls:$(BUILD)

# The CLI suites once more, on the AddressSanitizer + UBSan build (CI runs
# it after make check: tests/README.md says which suites and why).
check-asan: $(BUILD_ASAN)/Makefile
	@cmake --build $(BUILD_ASAN) -j$(JOBS)
	@tests/run.sh cli:$(BUILD_ASAN)

# The normal build only (quicker while developing).
check-fast: all
	@tests/run.sh $(BUILD)

# pglock against a Patroni cluster (three PostgreSQL nodes, etcd, HAProxy,
# TLS everywhere: tests/harness/ha.sh), asynchronous and synchronous, as
# root (tests/ha/check.sh).
check-ha: all
	@tests/ha/check.sh $(BUILD)

# The suites of the lock connection once more, each against a primary of
# its own that speaks TLS (harness.sh --tls; tests/run.sh, TLS_SUITES).
check-tls: all
	@tests/run.sh tls:$(BUILD)

# The C tests (library, parsers, live locking) under valgrind's memcheck.
check-valgrind: all
	@tests/run.sh valgrind:$(BUILD)

# Random faults against run and lead, and a checker (tests/chaos/README.md):
# make chaos [SEED=N] [DURATION=60s|10m|30m] [FAULTS="kill stop ..."]
# [SCENES="direct pooler partition ha"]; the same SEED, DURATION, FAULTS
# and SCENES replay the same schedule.  The ha scene (a Patroni cluster)
# runs here, not in make check's 60 s.
chaos: all
	@tests/chaos/chaos.sh $(if $(SEED),--seed $(SEED)) $(if $(DURATION),--duration $(DURATION)) $(if $(FAULTS),--faults "$(FAULTS)") $(if $(SCENES),--scenes "$(SCENES)") $(BUILD)

# The C and CLI tests against PostgreSQL 13, 14, 16, 17 and 18 (pinned
# server builds fetched once into a cache outside the tree, hashes
# checked; 16 and 17 run the suites of what changed in them):
# tests/versions/run.sh.
check-versions: all
	@tests/versions/run.sh $(BUILD)

demo: all
	@docs/demo/demo.sh $(BUILD)

bench: all
	@bench/run.sh $(BUILD)

# What one PostgreSQL carries: 100, 500 and 1,000 holders, storms and
# waiters against a throwaway server with max_connections raised
# (bench/capacity.sh; about 15 minutes; not part of `make bench`).
bench-capacity: all
	@bench/capacity.sh $(BUILD)

fuzz:
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPGLOCK_FUZZ=ON -DPGLOCK_TESTS=OFF -DPGLOCK_WERROR=ON >/dev/null
	@cmake --build build-fuzz -j$(JOBS)
	@tests/fuzz/run.sh build-fuzz

install: all
	@cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))

# Debian packages (debian/, docs/packages.md): pglock, libpglockN and
# libpglock-dev, built by dpkg-buildpackage from an export of the commit
# DEB_REF (default HEAD: what is committed, never the work tree's changes),
# unprivileged (Rules-Requires-Root: no), then checked by lintian.  The
# .debs go to $(DEB_OUT).
DEB_OUT ?= build-deb
DEB_REF ?= HEAD
deb:
	@tests/deb/build.sh $(DEB_REF) $(DEB_OUT)

# The packages installed, used and purged (tests/deb/deb.bats): needs
# root, changes the machine's packages; CI runs it.
# The packages are built with a TMPDIR of mode 0700, as root's may be: the
# build, which runs as nobody under root, must not need it.
check-deb: all
	@t=$$(mktemp -d) && { TMPDIR=$$t tests/deb/build.sh $(DEB_REF) $(DEB_OUT); rc=$$?; rm -rf "$$t"; exit $$rc; }
	@tests/deb/check.sh $(BUILD) $(DEB_OUT)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-fuzz $(DEB_OUT)
