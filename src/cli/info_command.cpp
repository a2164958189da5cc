// `fp8lm info`: what this build and this machine can run — the CPU kernels
// chosen at run time, whether the CUDA backend was compiled, and which GPUs it
// sees. The first thing to paste into a bug report.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "numerics/cast.h"
#ifdef FP8LM_WITH_CUDA
#include "backend/cuda/device_info.h"
#endif

namespace fp8lm::cli {
namespace {

nlohmann::json collect_info() {
  nlohmann::json j;
  j["version"] = FP8LM_VERSION;
  nlohmann::json kernels = nlohmann::json::array();
  for (std::string_view k : usable_kernel_names()) kernels.push_back(std::string(k));
  j["cpu"] = {{"kernels_usable", kernels}, {"kernels_selected", std::string(auto_kernel_name())}};
#ifdef FP8LM_WITH_CUDA
  j["cuda"]["compiled"] = true;
  j["cuda"]["targets"] = "sm_90a";
  const cuda::DeviceList list = cuda::list_devices();
  j["cuda"]["devices"] = nlohmann::json::array();
  for (const cuda::DeviceInfo& d : list.devices) {
    j["cuda"]["devices"].push_back({{"index", d.index},
                                    {"name", d.name},
                                    {"compute_capability", std::to_string(d.compute_major) + "." +
                                                               std::to_string(d.compute_minor)},
                                    {"memory_bytes", d.total_memory},
                                    {"multiprocessors", d.multiprocessors},
                                    {"runs_this_build", d.runs_this_build()}});
  }
  if (list.devices.empty()) j["cuda"]["unavailable"] = list.unavailable_reason;
#else
  j["cuda"]["compiled"] = false;
#endif
  return j;
}

void print_text(const nlohmann::json& j) {
  std::printf("fp8lm %s\n", j["version"].get<std::string>().c_str());
  std::string kernels;
  for (const auto& k : j["cpu"]["kernels_usable"]) kernels += (kernels.empty() ? "" : ", ") + k.get<std::string>();
  std::printf("CPU FP8 kernels: %s (using %s)\n", kernels.c_str(),
              j["cpu"]["kernels_selected"].get<std::string>().c_str());
  if (!j["cuda"]["compiled"].get<bool>()) {
    std::printf("CUDA backend: not compiled in (CPU only)\n");
    return;
  }
  std::printf("CUDA backend: compiled for %s\n", j["cuda"]["targets"].get<std::string>().c_str());
  if (j["cuda"].contains("unavailable")) {
    std::printf("CUDA devices: none (%s)\n", j["cuda"]["unavailable"].get<std::string>().c_str());
    return;
  }
  for (const auto& d : j["cuda"]["devices"]) {
    std::printf("CUDA device %d: %s, compute %s, %.1f GiB, %d SMs%s\n", d["index"].get<int>(),
                d["name"].get<std::string>().c_str(),
                d["compute_capability"].get<std::string>().c_str(),
                double(d["memory_bytes"].get<size_t>()) / (1024.0 * 1024.0 * 1024.0),
                d["multiprocessors"].get<int>(),
                d["runs_this_build"].get<bool>() ? "" : " (not Hopper: this build's kernels will not run)");
  }
}

}  // namespace

void add_info_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("info", "Show what this build and machine can run (CPU kernels, CUDA devices)");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->callback([json] {
    const nlohmann::json j = collect_info();
    if (*json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      print_text(j);
    }
  });
}

}  // namespace fp8lm::cli
