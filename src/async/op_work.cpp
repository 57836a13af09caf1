// The out-of-line part of include/tenferro/detail/async/op_work.hpp.

#include "tenferro/detail/async/op_work.hpp"

namespace tenferro::detail {

void ensure_system_context() { (void)asio::query(asio::system_executor(), asio::execution::context); }

}  // namespace tenferro::detail
