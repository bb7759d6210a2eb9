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

// Bytes [lo, hi) last touched by instruction `seq` of a pipe.
struct Segment {
    uint32_t lo;
    uint32_t hi;
    uint64_t seq;
};

// For one pipe and one kind of access (read or write): the newest
// instruction that touched each byte, as sorted, disjoint segments. A pipe
// that knows instruction k of another knows every earlier one, so the
// newest is all a conflict check needs.
class SegmentMap {
public:
    // The newest instruction that touched any byte of [lo, hi); 0 if none.
    uint64_t Newest(uint32_t lo, uint32_t hi) const
    {
        uint64_t newest = 0;
        for (const Segment &g : segs_) {
            if (g.lo >= hi) {
                break;
            }
            if (g.hi > lo) {
                newest = std::max(newest, g.seq);
            }
        }
        return newest;
    }

    // Instruction `seq` touched [lo, hi).
    void Assign(uint32_t lo, uint32_t hi, uint64_t seq)
    {
        // Most instructions touch exactly what an earlier one did.
        for (Segment &g : segs_) {
            if (g.lo == lo && g.hi == hi) {
                g.seq = seq;
                return;
            }
            if (g.lo >= hi) {
                break;
            }
        }
        std::vector<Segment> &out = scratch_;
        out.clear();
        bool placed = false;
        for (const Segment &g : segs_) {
            if (g.hi <= lo || g.lo >= hi) {
                if (!placed && g.lo >= hi) {
                    out.push_back({lo, hi, seq});
                    placed = true;
                }
                out.push_back(g);
                continue;
            }
            if (g.lo < lo) {
                out.push_back({g.lo, lo, g.seq});
            }
            if (!placed) {
                out.push_back({lo, hi, seq});
                placed = true;
            }
            if (g.hi > hi) {
                out.push_back({hi, g.hi, g.seq});
            }
        }
        if (!placed) {
            out.push_back({lo, hi, seq});
        }
        // Neighbours from the same instruction are one segment.
        segs_.clear();
        for (const Segment &g : out) {
            if (!segs_.empty() && segs_.back().hi == g.lo && segs_.back().seq == g.seq) {
                segs_.back().hi = g.hi;
            } else {
                segs_.push_back(g);
            }
        }
    }

private:
    std::vector<Segment> segs_;
    std::vector<Segment> scratch_;
};

// One buffer carved out of the UB by TPipe::InitBuffer.
struct BufferRec {
    uint32_t offset = 0; // from the UB start
    uint32_t bytes = 0;
    AscendC::TPosition pos = AscendC::TPosition::VECCALC;
    BufState state = BufState::kScratch;
    const void *owner = nullptr; // the TQue or TBuf
    std::string name;
    // Who touched which bytes last: [pipe][0 = read, 1 = write].
    SegmentMap touched[kPipes][2];
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

// Checks that instruction `seq` of pipe `p` in `api` may touch bytes
// [lo, hi) of `b` as `role`. The instruction's own accesses are recorded
// when it completes (RecordBytes), so an in-place operand is checked
// against older instructions only.
inline void CheckBytes(Timeline &tl, BufferRec *b, uint32_t lo, uint32_t hi, Pipe p, bool write,
                       const char *api, const char *role)
{
    if (hi <= lo) {
        return;
    }
    for (int q = 0; q < kPipes; ++q) {
        const Pipe other = static_cast<Pipe>(q);
        // A write conflicts with earlier reads and writes, a read with
        // earlier writes.
        for (int kind = write ? 0 : 1; kind < 2; ++kind) {
            const uint64_t newest = b->touched[q][kind].Newest(lo, hi);
            if (newest == 0 || tl.Knows(p, other, newest)) {
                continue;
            }
            Violation(Severity::kRecorded, "sync",
                      std::string(api) + ": " + role + " (" + b->name + ") " + (write ? "writes" : "reads") +
                          " UB bytes that " + UnitName(other) + " " + (kind == 1 ? "wrote" : "read") + " with no " +
                          SyncName(other, p) + " since");
            return;
        }
    }
}

inline void RecordBytes(BufferRec *b, uint32_t lo, uint32_t hi, Pipe p, uint64_t seq, bool write)
{
    if (hi > lo) {
        b->touched[static_cast<int>(p)][write ? 1 : 0].Assign(lo, hi, seq);
    }
}

} // namespace ta_shim

#endif // TA_SHIM_BUFFER_H
