#pragma once
/// \file
/// Umbrella header: everything a tenferro user needs.

#include "tenferro/admission_group.hpp"
#include "tenferro/admission_observer.hpp"
#include "tenferro/admission_timer.hpp"
#include "tenferro/asio.hpp"
#include "tenferro/backend_session.hpp"
#include "tenferro/backend_session_host.hpp"
#include "tenferro/batcher.hpp"
#include "tenferro/buffer_pool.hpp"
#include "tenferro/cpu_backend.hpp"
#include "tenferro/cpu_runtime_cache.hpp"
#include "tenferro/execution_scope.hpp"
#include "tenferro/io.hpp"
#include "tenferro/live_corpus.hpp"
#include "tenferro/npy_error.hpp"
#include "tenferro/session_entry_error.hpp"
#include "tenferro/session_grant.hpp"
#include "tenferro/session_host.hpp"
#include "tenferro/session_options.hpp"
#include "tenferro/tensor.hpp"
