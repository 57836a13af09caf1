#pragma once
// `tenferro-search demo --impatient`: clients that give up. The demo first
// measures the server's capacity the way the plain demo does (requests/s of
// `connections` patient keep-alive connections in a closed loop), then offers
// `overload` times that rate from as many impatient connections: each gives up
// on a search after a client-side timeout it does not tell the server, closes
// the connection (a full close) and connects again for its next search. The
// same load runs on a server that notices the closed connections and cancels
// their searches (server_options::notice_closed, the default) and on one that
// does not (the behaviour before issue 46), side by side: answers delivered in
// time per second, the share of computed answers nobody received, the
// server's CPU time per delivered answer and the age of the queue's head.

#include <string>

#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "demo.hpp"

namespace embedding_search {

/// Runs the capacity measurement and both variants on `corpus` and reports on
/// stdout, in `embedding_search_impatient.json` and `.svg` in `o.data_dir`;
/// returns the exit status (0: no errors, and answers delivered in both variants' runs).
int run_impatient_demo(const demo_options& o, const tenferro::tensor& corpus, const corpus_origin& origin,
                       const std::string& corpus_path);

}  // namespace embedding_search
