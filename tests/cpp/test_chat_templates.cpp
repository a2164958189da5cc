// Every real chat template in ../shared/data/hf (and the shipped model's)
// over the conversations of tools/make_chat_fixtures.py: the rendered prompt
// must be byte-identical to transformers' apply_chat_template, or fail with
// the same raise_exception message.
#include <gtest/gtest.h>

#include <map>

#include "chat/chat_template.h"
#include "chat_test_util.h"

namespace fp8lm::test {
namespace {

struct TemplateCase {
  std::string name;
  nlohmann::ordered_json c;
};

class RealTemplates : public ::testing::TestWithParam<std::string> {};

const nlohmann::ordered_json& fixture() {
  static const nlohmann::ordered_json f = read_ordered_json(chat_fixture("templates.json"));
  return f;
}

std::filesystem::path template_path(const nlohmann::ordered_json& t) {
  const std::string root = t["root"];
  const std::filesystem::path base =
      root == "hf" ? std::filesystem::path(FP8LM_SHARED_HF_DIR) : std::filesystem::path(FP8LM_FIXTURE_DIR).parent_path().parent_path();
  return base / t["path"].get<std::string>();
}

chat::ModelChatTemplate load_template(const nlohmann::ordered_json& t) {
  const auto p = template_path(t);
  if (p.extension() == ".jinja") {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return chat::ModelChatTemplate({{"default", ss.str()}}, t["bos_token"], t["eos_token"]);
  }
  return chat::ModelChatTemplate::load(p.parent_path());
}

TEST_P(RealTemplates, RendersLikeTransformers) {
  const auto& f = fixture();
  const auto& t = f["templates"][GetParam()];
  if (!std::filesystem::exists(template_path(t))) GTEST_SKIP() << template_path(t) << " is absent";
  const chat::ModelChatTemplate tmpl = load_template(t);
  EXPECT_EQ(tmpl.bos_token(), t["bos_token"].get<std::string>());
  EXPECT_EQ(tmpl.eos_token(), t["eos_token"].get<std::string>());
  int n = 0;
  for (const auto& c : f["cases"]) {
    if (c["template"] != GetParam()) continue;
    ++n;
    const auto& conv = f["conversations"][c["conversation"].get<std::string>()];
    chat::ChatInputs in;
    in.messages = conv["messages"];
    if (conv.contains("tools")) in.tools = conv["tools"];
    in.add_generation_prompt = c["add_generation_prompt"];
    in.kwargs = c["kwargs"];
    const std::string what = c["conversation"].get<std::string>() + " add_generation_prompt=" +
                             (in.add_generation_prompt ? "true" : "false") + " kwargs=" + c["kwargs"].dump();
    if (c.contains("expected")) {
      try {
        EXPECT_EQ(tmpl.render(in, fixed_clock_env()), c["expected"].get<std::string>()) << what;
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": unexpected error: " << e.what();
      }
    } else if (c["raised"].get<bool>()) {
      try {
        tmpl.render(in, fixed_clock_env());
        ADD_FAILURE() << what << ": expected raise_exception(" << c["error"] << ")";
      } catch (const chat::TemplateRaised& e) {
        EXPECT_EQ(e.message(), c["error"].get<std::string>()) << what;
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": expected raise_exception(" << c["error"] << "), got " << e.what();
      }
    } else {
      // transformers failed inside the template (e.g. None + str): we must fail too.
      EXPECT_THROW(tmpl.render(in, fixed_clock_env()), Error) << what << " (transformers: " << c["error"] << ")";
    }
  }
  EXPECT_GT(n, 0);
}

std::vector<std::string> template_ids() {
  std::vector<std::string> ids;
  for (const auto& [id, t] : fixture()["templates"].items()) ids.push_back(id);
  return ids;
}

INSTANTIATE_TEST_SUITE_P(Chat, RealTemplates, ::testing::ValuesIn(template_ids()), [](const auto& param_info) {
  std::string s = param_info.param;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
});

TEST(ModelChatTemplate, PicksToolUseTemplateWhenToolsGiven) {
  const chat::ModelChatTemplate t({{"default", "D"}, {"tool_use", "T{{ tools | length }}"}}, "", "");
  chat::ChatInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(t.render(in), "D");
  in.tools = nlohmann::ordered_json::parse(R"([{"type": "function"}])");
  EXPECT_EQ(t.render(in), "T1");
}

TEST(ModelChatTemplate, LoadsNamedListAndAddedTokens) {
  const auto dir = std::filesystem::temp_directory_path() / "fp8lm_chat_load_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": [{"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"},
      {"name": "tool_use", "template": "tools"}],
    "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>"})";
  const auto t = chat::ModelChatTemplate::load(dir);
  chat::ChatInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(t.render(in), "<s>hi</s>");
  EXPECT_EQ(t.names(), (std::vector<std::string>{"default", "tool_use"}));
  std::filesystem::remove_all(dir);
}

TEST(ModelChatTemplate, NoTemplateIsAnError) {
  const auto dir = std::filesystem::temp_directory_path() / "fp8lm_chat_none_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "</s>"})";
  EXPECT_THROW(chat::ModelChatTemplate::load(dir), Error);
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, EmptyConversationIsAnError) {
  const chat::ChatTemplate t("x");
  EXPECT_THROW(t.render({}), Error);
}

}  // namespace
}  // namespace fp8lm::test
