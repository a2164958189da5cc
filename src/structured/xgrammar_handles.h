// The xgrammar objects behind this folder's classes, which their headers only forward-declare:
// included by this folder's .cpp files alone, so that nothing else sees xgrammar's headers.
#pragma once

#include <xgrammar/xgrammar.h>

namespace fp8lm::structured {

struct VocabularyHandle {
  xgrammar::TokenizerInfo info;
};

struct GrammarHandle {
  xgrammar::CompiledGrammar grammar;
};

}  // namespace fp8lm::structured
