// The pipes of a simulated AI Core vector core (scalar, vector, MTE2 in,
// MTE3 out), what each pipe has synchronised with, and when each pipe is
// busy: the basis of both the sync rules (buffer.h) and the cost model
// (cost.h).
//
// Pipes execute their own instructions in order. A pipe learns that
// another pipe's instructions have completed only through a handshake:
// SetFlag/WaitFlag, a queue's EnQue/DeQue or FreeTensor/AllocTensor, or
// PipeBarrier. Each pipe keeps a vector clock of the newest instruction of
// every pipe it has synchronised with; a handshake carries the sender's
// clock and completion time to the receiver, which may not start anything
// earlier.
#ifndef TA_SHIM_TIMELINE_H
#define TA_SHIM_TIMELINE_H

#include <algorithm>
#include <cstdint>

namespace ta_shim {

enum class Pipe : uint8_t { kS = 0, kV = 1, kMte2 = 2, kMte3 = 3 };
constexpr int kPipes = 4;

inline const char *PipeName(Pipe p)
{
    static const char *const names[] = {"S", "V", "MTE2", "MTE3"};
    return names[static_cast<int>(p)];
}

// seq[q]: the newest instruction of pipe q (numbered from 1 per pipe and
// core) known to have completed.
struct VClock {
    uint64_t seq[kPipes] = {0, 0, 0, 0};

    void Join(const VClock &o)
    {
        for (int q = 0; q < kPipes; ++q) {
            seq[q] = std::max(seq[q], o.seq[q]);
        }
    }
};

// What a handshake passes from the pipe that set it to the one that waits.
struct SyncToken {
    VClock clock;
    double time = 0; // completion of the sender's instructions so far
};

struct PipeState {
    uint64_t issued = 0; // seq of the newest instruction issued here
    double free_at = 0;  // when that instruction completes (cycles)
    double floor = 0;    // nothing starts earlier (raised by waits)
    double busy = 0;     // cycles spent executing
    uint64_t count = 0;  // instructions executed
    VClock known;        // instructions of other pipes synchronised with
};

// One core's pipes during one block of a launch.
struct Timeline {
    PipeState pipe[kPipes];
    // The scalar unit's clock: it issues every instruction, one per cycle
    // at best, and blocks on waits addressed to it.
    double scalar_now = 0;
    // The core's shares of global-memory bandwidth: MTE2 reads and MTE3
    // writes each run in order on their own pipe at their own rate
    // (cost.h), so a transfer simply occupies its pipe.
    double read_bytes_per_cycle = 1;
    double write_bytes_per_cycle = 1;
    uint64_t gm_bytes = 0;
    // Vector-pipe cycles by kind: repeats as if conflict-free, the extra
    // cycles bank conflicts add, per-instruction issue.
    double vector_repeat_cycles = 0;
    double bank_conflict_cycles = 0;
    double issue_cycles = 0;

    PipeState &P(Pipe p) { return pipe[static_cast<int>(p)]; }

    double End() const
    {
        double end = scalar_now;
        for (const PipeState &s : pipe) {
            end = std::max(end, s.free_at);
        }
        return end;
    }

    // Issues an instruction on pipe p and returns its sequence number. The
    // scalar unit spends one cycle dispatching it.
    uint64_t Begin(Pipe p)
    {
        PipeState &s = P(p);
        if (p != Pipe::kS) {
            scalar_now = std::max(scalar_now, P(Pipe::kS).floor) + 1;
            P(Pipe::kS).busy += 1;
            P(Pipe::kS).free_at = scalar_now;
        }
        return ++s.issued;
    }

    // Completes the instruction just begun on p after `cycles` of work;
    // `gm_bytes` of it are global-memory traffic (MTE pipes).
    void Finish(Pipe p, double cycles, uint64_t bytes)
    {
        PipeState &s = P(p);
        s.count += 1;
        s.busy += cycles;
        if (p == Pipe::kS) {
            scalar_now = std::max(scalar_now, s.floor) + cycles;
            s.free_at = scalar_now;
            return;
        }
        const double start = std::max({s.free_at, s.floor, scalar_now});
        gm_bytes += bytes;
        s.free_at = start + cycles;
    }

    // The handshake pipe q sends now: everything it issued so far.
    SyncToken Snapshot(Pipe q)
    {
        SyncToken t;
        t.clock = P(q).known;
        t.clock.seq[static_cast<int>(q)] = P(q).issued;
        t.time = P(q).free_at;
        return t;
    }

    // Pipe p waits for a handshake.
    void Receive(Pipe p, const SyncToken &t)
    {
        PipeState &s = P(p);
        s.known.Join(t.clock);
        if (p == Pipe::kS) {
            scalar_now = std::max(scalar_now, t.time);
            s.free_at = std::max(s.free_at, scalar_now);
        } else {
            s.floor = std::max(s.floor, t.time);
        }
    }

    // Whether pipe p may touch bytes that instruction `seq` of pipe q used.
    bool Knows(Pipe p, Pipe q, uint64_t seq)
    {
        // Scalar and MTE pipes run their own instructions strictly in
        // order; the vector pipe overlaps them unless a PipeBarrier says
        // otherwise.
        if (p == q && p != Pipe::kV) {
            return true;
        }
        return P(p).known.seq[static_cast<int>(q)] >= seq;
    }

    // Whether every pipe knows instruction `seq` of q: its accesses can no
    // longer conflict with anything.
    bool AllKnow(Pipe q, uint64_t seq)
    {
        for (int p = 0; p < kPipes; ++p) {
            if (!Knows(static_cast<Pipe>(p), q, seq)) {
                return false;
            }
        }
        return true;
    }
};

} // namespace ta_shim

#endif // TA_SHIM_TIMELINE_H
