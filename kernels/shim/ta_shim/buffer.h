// Unified Buffer allocations (TQue and TBuf buffers) and the sync rule on
// their bytes: a pipe may touch bytes another pipe wrote (or read, when it
// writes) only after a handshake that orders the two, and a vector
// instruction may touch bytes an earlier vector instruction wrote (or
// read, when it writes) only after PipeBarrier<PIPE_V>, as the AscendC docs
// require for dependent instructions of one pipe (PipeBarrier page,
// docs/zh/api/SIMD-API/基础API/同步控制/核内同步/).
#ifndef TA_SHIM_BUFFER_H
#define TA_SHIM_BUFFER_H

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "state.h"
#include "timeline.h"

namespace AscendC {
enum class TPosition : uint8_t { GM, VECIN, VECOUT, VECCALC };
using QuePosition = TPosition;
} // namespace AscendC

namespace ta_shim {

enum class BufState : uint8_t {
    kFree,      // queue buffer not handed out
    kAllocated, // AllocTensor'd, not yet EnQue'd
    kQueued,    // EnQue'd, waiting for DeQue
    kDequeued,  // DeQue'd, waiting for FreeTensor
    kScratch,   // TBuf memory: always usable
};

inline const char *StateName(BufState s)
{
    switch (s) {
    case BufState::kFree: return "free (FreeTensor'd or never allocated)";
    case BufState::kAllocated: return "allocated";
    case BufState::kQueued: return "in its queue (EnQue'd, not DeQue'd)";
    case BufState::kDequeued: return "dequeued";
    case BufState::kScratch: return "scratch";
    }
    return "?";
}

// Bytes [lo, hi) of a buffer used by instruction `seq` of `pipe`.
struct Access {
    uint32_t lo;
    uint32_t hi;
    Pipe pipe;
    bool write;
    uint64_t seq;
};

// One buffer carved out of the UB by TPipe::InitBuffer.
struct BufferRec {
    uint32_t offset = 0; // from the UB start
    uint32_t bytes = 0;
    AscendC::TPosition pos = AscendC::TPosition::VECCALC;
    BufState state = BufState::kScratch;
    const void *owner = nullptr; // the TQue or TBuf
    std::string name;
    // Accesses not yet known to every pipe.
    std::vector<Access> log;
    // Queue handshakes: EnQue -> DeQue, FreeTensor -> AllocTensor.
    SyncToken enqueued;
    SyncToken freed;
};

// The handshake that orders pipe q before pipe p, for messages.
inline std::string SyncName(Pipe q, Pipe p)
{
    if (q == p) {
        return "PipeBarrier<PIPE_V>";
    }
    std::string n = std::string("SetFlag/WaitFlag<HardEvent::") + PipeName(q) + "_" + PipeName(p) + ">";
    if (q == Pipe::kMte2 && p == Pipe::kV) {
        n += " (a VECIN queue's EnQue/DeQue)";
    } else if (q == Pipe::kV && p == Pipe::kMte3) {
        n += " (a VECOUT queue's EnQue/DeQue)";
    } else if (q == Pipe::kV && p == Pipe::kMte2) {
        n += " (a VECIN queue's FreeTensor/AllocTensor)";
    } else if (q == Pipe::kMte3 && p == Pipe::kV) {
        n += " (a VECOUT queue's FreeTensor/AllocTensor)";
    }
    return n;
}

inline const char *UnitName(Pipe p)
{
    switch (p) {
    case Pipe::kS: return "the scalar unit (S)";
    case Pipe::kV: return "a vector instruction";
    case Pipe::kMte2: return "a copy into the UB (MTE2)";
    case Pipe::kMte3: return "a copy out of the UB (MTE3)";
    }
    return "?";
}

// Checks and records that instruction `seq` of pipe `p` in `api` touches
// bytes [lo, hi) of `b` as `role`.
inline void TouchBytes(BufferRec *b, uint32_t lo, uint32_t hi, Pipe p, uint64_t seq, bool write,
                       const char *api, const char *role)
{
    Timeline &tl = Core().tl;
    if (hi <= lo) {
        return;
    }
    for (const Access &e : b->log) {
        if ((e.pipe == p && e.seq == seq) || !(e.write || write) || e.hi <= lo || hi <= e.lo) {
            continue;
        }
        if (tl.Knows(p, e.pipe, e.seq)) {
            continue;
        }
        Violation(Severity::kRecorded, "sync",
                  std::string(api) + ": " + role + " (" + b->name + ") " + (write ? "writes" : "reads") +
                      " UB bytes that " + UnitName(e.pipe) + " " + (e.write ? "wrote" : "read") +
                      " with no " + SyncName(e.pipe, p) + " since");
        break;
    }
    // Forget what every pipe knows, and what a newer access of the same
    // pipe covers: it conflicts with everything the older one would.
    std::vector<Access> &log = b->log;
    size_t keep = 0;
    for (size_t i = 0; i < log.size(); ++i) {
        const Access &e = log[i];
        const bool covered = e.pipe == p && (write || !e.write) && lo <= e.lo && e.hi <= hi;
        if (!covered && !tl.AllKnow(e.pipe, e.seq)) {
            log[keep++] = e;
        }
    }
    log.resize(keep);
    // A run of accesses no other pipe has synchronised with yet (scalar
    // stores element by element) is one access: a pipe that learns of the
    // newest learns of them all.
    if (!log.empty()) {
        Access &last = log.back();
        bool others_know = false;
        for (int q = 0; q < kPipes; ++q) {
            const Pipe other = static_cast<Pipe>(q);
            others_know = others_know || ((other != p || p == Pipe::kV) && tl.Knows(other, p, last.seq));
        }
        if (last.pipe == p && last.write == write && !others_know && lo <= last.hi && last.lo <= hi) {
            last.lo = std::min(last.lo, lo);
            last.hi = std::max(last.hi, hi);
            last.seq = seq;
            return;
        }
    }
    log.push_back({lo, hi, p, write, seq});
}

} // namespace ta_shim

#endif // TA_SHIM_BUFFER_H
