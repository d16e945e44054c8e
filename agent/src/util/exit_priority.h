// At exit, every thread of the process must be scheduled once more before
// the process is gone: on a node whose cores are busy, each waits its turn
// behind the load, and exit takes a scheduler slot per thread (measured on
// 2 busy cores: 3.3-3.9 ms at the median for devplugd's 14 threads, 1.8 ms
// when they are favoured; bench/startstop_bench.cc).
//
// RaiseExitPriority() lowers the nice value of every thread of this process
// to `nice`, so that the last steps of a stop run ahead of the load. It
// needs CAP_SYS_NICE, which the shipped unit and DaemonSet do not grant;
// without it nothing changes and it returns false. It is meant for the path to exit only: the
// threads keep the raised priority.
#pragma once

namespace devplug {

bool RaiseExitPriority(int nice);

}  // namespace devplug
