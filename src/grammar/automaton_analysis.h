// Whole-automaton analyses run once after the DFAs are built (see automaton_analysis.cpp).
#pragma once

#include "grammar/automaton.h"

namespace deepinfer::grammar {

// Prunes states that cannot reach a final state, rejects left recursion and empty languages, and
// fills follow sets, self loops and dead-end flags.
void analyze_automaton(Automaton& a);

}  // namespace deepinfer::grammar
