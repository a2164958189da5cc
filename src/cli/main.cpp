// fp8lm: the command-line front-end. Subcommands live in their own files.
#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "common/error.h"

int main(int argc, char** argv) {
  CLI::App app{"fp8lm: large language models in FP8, on Hopper GPUs and on any CPU", "fp8lm"};
  app.set_version_flag("--version", std::string("fp8lm ") + FP8LM_VERSION);
  app.require_subcommand(1);
  fp8lm::cli::add_info_command(app);
  fp8lm::cli::add_inspect_command(app);
  fp8lm::cli::add_tokenize_command(app);
  fp8lm::cli::add_generate_command(app);
  fp8lm::cli::add_chat_command(app);
  fp8lm::cli::add_quantize_command(app);
  fp8lm::cli::add_eval_command(app);
  fp8lm::cli::add_bench_command(app);
  fp8lm::cli::add_serve_command(app);
  fp8lm::cli::add_grammar_worker_command(app);  // internal: not listed below or in --help
  // CLI11 reports a misspelt command as "a subcommand is required"; name it instead.
  std::string known;
  bool is_known = false;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (!sub->get_group().empty()) known += (known.empty() ? "" : ", ") + sub->get_name();
    is_known = is_known || (argc > 1 && sub->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !is_known) {
    std::fprintf(stderr, "fp8lm: error: unknown command '%s' (commands: %s; see fp8lm --help)\n", argv[1],
                 known.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fp8lm::Error& e) {
    std::fprintf(stderr, "fp8lm: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8lm: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
