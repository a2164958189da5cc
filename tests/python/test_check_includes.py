"""tools/check_includes.py on small synthetic source trees (one rule broken each), and on the real tree."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "check_includes.py"


def check(root, *args):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), *args],
                          capture_output=True, text=True, timeout=60)


def tree(tmp_path, files):
    """Writes {path under the root: text} and returns the root. A value that is a list is the
    quoted includes of that file."""
    for rel, content in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, list):
            content = "".join(f'#include "{inc}"\n' for inc in content)
        p.write_text(content)
    return tmp_path


# A tree that keeps every rule: downward includes, the factory reaching into both sealed
# backends, the one allowed exception, the macro where it may appear, and the two cycles that
# MODULE_CYCLES_ALLOWED lists (the chat interpreter's, CudaOps and its private half).
CLEAN = {
    "src/common/error.h": "",
    "src/numerics/quantize.h": ["common/error.h"],
    "src/numerics/quantize.cpp": ["numerics/quantize.h", "cpu/kernels.h"],
    "src/numerics/cpu/kernels.h": [],
    "src/spec/model_config.h": ["numerics/quantize.h"],
    "src/io/json_file.h": ["spec/model_config.h"],
    "src/backend/ops.h": ["common/error.h"],
    "src/backend/cpu/cpu_ops.h": ["backend/ops.h"],
    "src/backend/cuda/cuda_ops.h": ["backend/ops.h", "device_info.h"],
    "src/backend/cuda/cuda_ops.cpp": ["backend/cuda/cuda_ops.h", "backend/cuda/cuda_ops_impl.h"],
    "src/backend/cuda/cuda_ops_impl.h": ["backend/cuda/cuda_ops.h"],
    "src/backend/cuda/device_info.h": "#ifdef FP8LM_WITH_CUDA\n#endif\n",
    "src/backend/factory/make_ops.cpp": '#include "backend/cpu/cpu_ops.h"\n#ifdef FP8LM_WITH_CUDA\n'
                                        '#include "backend/cuda/cuda_ops.h"\n#endif\n',
    "src/engine/runtime.cpp": ["backend/ops.h", "io/json_file.h"],
    "src/cli/info_command.cpp": ["backend/cuda/device_info.h", "engine/runtime.h"],
    "src/engine/runtime.h": [],
    "src/chat/ast.h": ["chat/value.h"],
    "src/chat/value.h": [],
    "src/chat/value.cpp": ["chat/value.h", "chat/eval.h"],
    "src/chat/eval.h": ["chat/ast.h"],
    "src/chat/eval.cpp": ["chat/eval.h", "chat/builtins.h"],
    "src/chat/builtins.h": [],
    "src/chat/builtins.cpp": ["chat/builtins.h", "chat/value.h"],
}


def test_clean_tree_passes(tmp_path):
    r = check(tree(tmp_path, CLEAN))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 error(s), 0 known, 0 note(s)" in r.stdout


def test_upward_include_fails(tmp_path):
    r = check(tree(tmp_path, {**CLEAN, "src/numerics/cast.h": ["spec/model_config.h"]}))
    assert r.returncode == 1
    assert ("error: src/numerics/cast.h:1: numerics (rank 1) includes src/spec/model_config.h (spec, rank 2): "
            "upward include") in r.stdout


def test_peer_include_fails(tmp_path):
    r = check(tree(tmp_path, {**CLEAN, "src/engine/runtime.cpp": ["backend/ops.h", "quantize/calibration.h"],
                              "src/quantize/calibration.h": []}))
    assert r.returncode == 1
    assert ("error: src/engine/runtime.cpp:2: engine (rank 11) includes src/quantize/calibration.h "
            "(quantize, rank 11): peers never include each other") in r.stdout


def test_sealed_include_fails(tmp_path):
    # engine is above backend/cpu, so only the seal forbids this include.
    r = check(tree(tmp_path, {**CLEAN, "src/engine/runtime.cpp": ["backend/cpu/cpu_ops.h"]}))
    assert r.returncode == 1
    assert ("error: src/engine/runtime.cpp:1: engine (rank 11) includes src/backend/cpu/cpu_ops.h (backend/cpu, "
            "rank 7): backend/cpu is sealed (only backend/factory may include it)") in r.stdout
    assert "upward" not in r.stdout


def test_backends_are_sealed_from_each_other(tmp_path):
    r = check(tree(tmp_path, {**CLEAN, "src/backend/cuda/cuda_ops.cpp": ["backend/cpu/cpu_ops.h"]}))
    assert r.returncode == 1
    assert "peers never include each other; backend/cpu is sealed" in r.stdout


def test_module_cycle_fails(tmp_path):
    # No file includes itself through others; only a .h + .cpp pair taken as one module closes the loop.
    r = check(tree(tmp_path, {**CLEAN, "src/io/quant_config.h": [], "src/io/quant_config.cpp": ["quant_formats.h"],
                              "src/io/quant_formats.h": ["io/quant_config.h"]}))
    assert r.returncode == 1
    assert ("error: src/io/quant_config.cpp:1: module cycle: src/io/quant_config src/io/quant_formats "
            "(src/io/quant_config.cpp:1 -> src/io/quant_formats.h; src/io/quant_formats.h:1 -> src/io/quant_config.h)"
            ) in r.stdout
    assert "file cycle" not in r.stdout


def test_allowed_module_cycle_grown_by_a_module_fails(tmp_path):
    r = check(tree(tmp_path, {**CLEAN, "src/chat/lexer.h": ["chat/ast.h"], "src/chat/value.h": ["chat/lexer.h"]}))
    assert r.returncode == 1
    assert "module cycle: src/chat/ast src/chat/builtins src/chat/eval src/chat/lexer src/chat/value" in r.stdout


def test_file_cycle_fails(tmp_path):
    r = check(tree(tmp_path, {**CLEAN, "src/io/a.h": ["b.h"], "src/io/b.h": ["a.h"]}))
    assert r.returncode == 1
    assert "error: src/io/a.h:1: file cycle: src/io/a.h src/io/b.h" in r.stdout


def test_cuda_macro_outside_the_factory_fails(tmp_path):
    r = check(tree(tmp_path, {**CLEAN, "src/engine/runtime.cpp": "#include \"backend/ops.h\"\n#ifdef FP8LM_WITH_CUDA\n"
                                                                  "#endif\n"}))
    assert r.returncode == 1
    assert "error: src/engine/runtime.cpp:2: FP8LM_WITH_CUDA outside the backend factory" in r.stdout


def test_unresolved_include_and_unlisted_folder_fail(tmp_path):
    r = check(tree(tmp_path, {**CLEAN, "src/model/llama_model.cpp": ["model/rope.h"], "src/misc/x.h": []}))
    assert r.returncode == 1
    assert 'error: src/model/llama_model.cpp:1: #include "model/rope.h" resolves neither' in r.stdout
    assert "error: src/misc/x.h: is in no component of LAYERS" in r.stdout


def test_known_violations_warn_and_stale_entries_are_notes(tmp_path):
    root = tree(tmp_path, {**CLEAN, "src/engine/runtime.cpp": ["backend/ops.h", "backend/cpu/cpu_ops.h"]})
    known = tmp_path / "known.txt"
    # The line number differs from today's (2): another change moved the include, it still matches.
    known.write_text("# comment\nsrc/engine/runtime.cpp:7 -> src/backend/cpu/cpu_ops.h\n"
                     "src/loader/host_weights.h:14 -> src/backend/cpu/linear.h\n")
    r = check(root, "--known", str(known))
    assert r.returncode == 0, r.stdout
    assert "warning: src/engine/runtime.cpp:2: engine (rank 11) includes src/backend/cpu/cpu_ops.h" in r.stdout
    assert (f"note: {known}:3: 'src/loader/host_weights.h -> src/backend/cpu/linear.h' no longer occurs: "
            "delete the line") in r.stdout
    # A violation not in the file is still an error.
    root = tree(tmp_path, {"src/numerics/cast.h": ["spec/model_config.h"]})
    assert check(root, "--known", str(known)).returncode == 1


def test_write_known_then_known_passes(tmp_path):
    root = tree(tmp_path / "t", {**CLEAN, "src/engine/runtime.cpp": ["backend/cpu/cpu_ops.h"],
                                 "src/io/a.h": [], "src/io/a.cpp": ["b.h"], "src/io/b.h": ["a.h"]})
    known = tmp_path / "known.txt"
    r = check(root, "--write-known", str(known))
    assert r.returncode == 0, r.stdout
    lines = [x for x in known.read_text().splitlines() if not x.startswith("#")]
    assert lines == ["src/engine/runtime.cpp:1 -> src/backend/cpu/cpu_ops.h", "module cycle: src/io/a src/io/b"]
    r = check(root, "--known", str(known))
    assert r.returncode == 0 and "0 error(s), 2 known, 0 note(s)" in r.stdout


def test_cmake_link_edges(tmp_path):
    root = tree(tmp_path, {**CLEAN, "src/backend/cpu/cpu.cmake":
                           "add_library(fp8lm_cpu STATIC ${CMAKE_CURRENT_LIST_DIR}/cpu_ops.cpp)\n",
                           "src/backend/cpu/cpu_ops.cpp": ["cpu_ops.h"],
                           "src/backend/cuda/cuda.cmake":
                           "add_library(fp8lm_cuda STATIC\n  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops.cpp)  # the backend\n"
                           "target_link_libraries(fp8lm_cuda PUBLIC fp8lm_cpu)\n",
                           "src/backend/cuda/cuda_ops.cpp": ["cuda_ops.h"]})
    assert check(root).returncode == 0  # link edges are checked only with --cmake
    r = check(root, "--cmake")
    assert r.returncode == 1
    assert ("error: src/backend/cuda/cuda.cmake:3: fp8lm_cuda (backend/cuda, rank 7) links fp8lm_cpu "
            "(backend/cpu, rank 7): peers never include each other") in r.stdout


# The CUDA backend's sub-folders (SUBLAYERS): families over common/ and quant/, CudaOps above them,
# comm/ above CudaOps.
CUDA_FOLDERS = {
    "src/backend/cuda/common/check.h": [],
    "src/backend/cuda/quant/quant_kernels.h": ["backend/cuda/common/check.h"],
    "src/backend/cuda/gemv/fp8_gemv.h": ["backend/cuda/quant/quant_kernels.h", "backend/cuda/common/check.h"],
    "src/backend/cuda/attention/paged_attention.h": ["backend/cuda/common/check.h"],
    # The persistent kernel runs the families' device code: it sits above them, below CudaOps.
    "src/backend/cuda/persistent/decode_program.h": ["backend/cuda/gemv/fp8_gemv.h",
                                                      "backend/cuda/attention/paged_attention.h"],
    "src/backend/cuda/comm/nccl_group.h": ["backend/cuda/cuda_ops.h"],
}


def test_cuda_folders_in_order_pass(tmp_path):
    r = check(tree(tmp_path, {**CLEAN, **CUDA_FOLDERS, "src/backend/cuda/cuda_ops.cpp":
                              ["backend/cuda/cuda_ops.h", "backend/cuda/cuda_ops_impl.h",
                               "backend/cuda/gemv/fp8_gemv.h", "backend/cuda/attention/paged_attention.h",
                               "backend/cuda/persistent/decode_program.h"]}))
    assert r.returncode == 0, r.stdout


def test_cuda_family_including_a_peer_or_cuda_ops_fails(tmp_path):
    r = check(tree(tmp_path, {**CLEAN, **CUDA_FOLDERS,
                              "src/backend/cuda/gemv/fp8_gemv.cu": ["backend/cuda/attention/paged_attention.h"],
                              "src/backend/cuda/quant/quant_kernels.cu": ["backend/cuda/cuda_ops.h"],
                              "src/backend/cuda/gemv/bf16_gemv.cu": ["backend/cuda/persistent/decode_program.h"],
                              "src/backend/cuda/misc/x.h": []}))
    assert r.returncode == 1
    assert ("error: src/backend/cuda/gemv/fp8_gemv.cu:1: backend/cuda/gemv (sub-rank 2) includes "
            "src/backend/cuda/attention/paged_attention.h (backend/cuda/attention (sub-rank 2)): "
            "peers never include each other") in r.stdout
    assert ("error: src/backend/cuda/quant/quant_kernels.cu:1: backend/cuda/quant (sub-rank 1) includes "
            "src/backend/cuda/cuda_ops.h (backend/cuda (sub-rank 4)): upward include") in r.stdout
    assert ("error: src/backend/cuda/gemv/bf16_gemv.cu:1: backend/cuda/gemv (sub-rank 2) includes "
            "src/backend/cuda/persistent/decode_program.h (backend/cuda/persistent (sub-rank 3)): upward include") \
        in r.stdout
    assert ("error: src/backend/cuda/misc/x.h: is in no sub-folder of SUBLAYERS['backend/cuda']") in r.stdout


def test_cuda_fragment_listing_another_folder_fails(tmp_path):
    root = tree(tmp_path, {**CLEAN, **CUDA_FOLDERS,
                           "src/backend/cuda/cuda.cmake": "add_library(fp8lm_cuda STATIC ${CMAKE_CURRENT_LIST_DIR}/"
                                                          "cuda_ops.cpp)\ninclude(gemv/gemv.cmake)\n",
                           "src/backend/cuda/gemv/gemv.cmake": "target_sources(fp8lm_cuda PRIVATE\n"
                                                               "  ${CMAKE_CURRENT_LIST_DIR}/fp8_gemv.cu\n"
                                                               "  ${CMAKE_CURRENT_LIST_DIR}/../moe/moe.cu)\n",
                           "src/backend/cuda/gemv/fp8_gemv.cu": ["fp8_gemv.h"],
                           "src/backend/cuda/moe/moe.cu": []})
    r = check(root, "--cmake")
    assert r.returncode == 1
    assert ("error: src/backend/cuda/gemv/gemv.cmake:1: lists src/backend/cuda/moe/moe.cu, outside its own "
            "folder src/backend/cuda/gemv") in r.stdout
    assert "gemv.cmake:1: lists src/backend/cuda/gemv/fp8_gemv.cu" not in r.stdout


def test_graph_marks_wrong_arrows(tmp_path):
    r = check(tree(tmp_path, {**CLEAN, "src/engine/runtime.cpp": ["backend/cpu/cpu_ops.h"]}), "--graph")
    assert r.returncode == 0
    lines = {" ".join(x.split()) for x in r.stdout.splitlines()}
    assert "engine (11) -> backend/cpu (7): 1 ✗ backend/cpu is sealed (only backend/factory may include it)" in lines
    assert "cli (13) -> backend/cuda (7): 1" in lines  # the listed exception
    assert "backend/factory (8) -> backend/cpu (7): 1" in lines


def test_real_tree_passes_with_its_cmake_targets():
    r = check(REPO, "--cmake")
    assert r.returncode == 0, r.stdout
    assert "0 error(s), 0 known, 0 note(s)" in r.stdout
