# Prism — the two commands:
#   make demo   install missing Debian packages, build, run the main job
#   make test   install missing Debian packages, build, run every test
# Other targets: build, asan, tsan, fuzz, bench, install, format, clean.
JOBS      ?= $(shell nproc)
BUILD     ?= build
ASAN      ?= build-asan
TSAN      ?= build-tsan
FUZZ      ?= build-fuzz
PREFIX    ?= /usr/local
DEMO_OUT  ?= demo-out
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
CTEST_J   ?= $(JOBS)

.PHONY: all deps build asan tsan fuzz test test-main test-asan test-tsan test-fuzz demo bench install format clean

all: build

deps:
	@.ci/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

$(ASAN)/CMakeCache.txt:
	cmake -S . -B $(ASAN) $(GENERATOR) -DCMAKE_BUILD_TYPE=Debug -DPRISM_SANITIZE=ON \
	  -DPRISM_BUILD_BENCH=OFF

asan: deps $(ASAN)/CMakeCache.txt
	cmake --build $(ASAN) -j $(JOBS) --target prism_unit_tests

# ThreadSanitizer: the NCCL plugin and its tests (the plugin is the part
# NCCL drives from several threads at once) and the Endpoint's (its event
# loop thread against application threads; label "threads").
$(TSAN)/CMakeCache.txt:
	cmake -S . -B $(TSAN) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRISM_TSAN=ON \
	  -DPRISM_BUILD_BENCH=OFF

tsan: deps $(TSAN)/CMakeCache.txt
	cmake --build $(TSAN) -j $(JOBS) --target prism_nccl_tests prism_thread_tests

$(FUZZ)/CMakeCache.txt:
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DPRISM_FUZZ=ON -DPRISM_BUILD_BENCH=OFF

fuzz: deps $(FUZZ)/CMakeCache.txt
	cmake --build $(FUZZ) -j $(JOBS) --target prism_fuzzers

test-main: build
	cd $(BUILD) && ctest --output-on-failure -j $(CTEST_J) -LE fuzz

test-asan: asan
	cd $(ASAN) && ctest --output-on-failure -j $(CTEST_J) -L unit

test-tsan: tsan
	cd $(TSAN) && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 $(TSAN_OPTIONS)" \
	  ctest --output-on-failure -j $(CTEST_J) -L 'nccl|threads'

test-fuzz: fuzz
	cd $(FUZZ) && ctest --output-on-failure -j $(CTEST_J) -L fuzz

# Every test: the main build, the unit tests again under ASan+UBSan, the NCCL
# plugin's and the Endpoint's tests under TSan, and each libFuzzer target for
# a bounded time.
# All four run even when one fails; the exit status says whether any failed.
test: deps
	@rc=0; \
	$(MAKE) test-main || rc=1; \
	$(MAKE) test-asan || rc=1; \
	$(MAKE) test-tsan || rc=1; \
	$(MAKE) test-fuzz || rc=1; \
	if [ $$rc -ne 0 ]; then echo "make test: FAILED (see above)"; fi; \
	exit $$rc

demo: build
	@if [ -x $(BUILD)/bin/prism_bench ]; then \
	  $(BUILD)/bin/prism_bench headline --quick --out $(DEMO_OUT); \
	else \
	  $(BUILD)/bin/prism_demo; \
	fi

bench: build
	$(BUILD)/bin/prism_microbench

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN) $(TSAN) $(FUZZ)
