// The thread-local mark of kernels/stop_point.hpp.

#include "kernels/stop_point.hpp"

namespace tenferro::kernels::stop_detail {

thread_local const std::stop_token* current = nullptr;

}  // namespace tenferro::kernels::stop_detail
