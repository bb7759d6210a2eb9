// TPipe, TQue, TBuf and the synchronisation primitives.
//
// Queues enforce the AscendC discipline AllocTensor -> EnQue -> DeQue ->
// FreeTensor on each of their buffers; anything else is a fatal violation,
// because on the device it either waits forever or races with a copy.
// Each step is also a handshake between the queue's producer and consumer
// pipes (VECIN: MTE2 fills, the vector unit consumes; VECOUT: the vector
// unit fills, MTE3 consumes): EnQue/DeQue orders the producer's work before
// the consumer, FreeTensor/AllocTensor the consumer's before the producer
// refills the buffer. Every queue operation, flag and barrier is one scalar
// instruction.
#ifndef TA_SHIM_PIPE_H
#define TA_SHIM_PIPE_H

#include <algorithm>
#include <cstdint>
#include <deque>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "buffer.h"
#include "state.h"
#include "tensor.h"

// Pipes and event ids are global names in the device compiler.
enum pipe_t : uint8_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL };
enum event_t : int32_t {
    EVENT_ID0 = 0,
    EVENT_ID1,
    EVENT_ID2,
    EVENT_ID3,
    EVENT_ID4,
    EVENT_ID5,
    EVENT_ID6,
    EVENT_ID7,
};

namespace AscendC {

using TEventID = int8_t;

enum class HardEvent : uint8_t {
    MTE2_V,
    V_MTE2,
    V_MTE3,
    MTE3_V,
    MTE2_S,
    S_MTE2,
    MTE3_S,
    S_MTE3,
    S_V,
    V_S,
    MTE2_MTE3,
    MTE3_MTE2,
};

class TPipe;

} // namespace AscendC

namespace ta_shim {

inline thread_local AscendC::TPipe *tls_pipe = nullptr;

// Producer and consumer pipes of a queue position.
inline Pipe Producer(AscendC::TPosition pos) { return pos == AscendC::TPosition::VECIN ? Pipe::kMte2 : Pipe::kV; }
inline Pipe Consumer(AscendC::TPosition pos) { return pos == AscendC::TPosition::VECIN ? Pipe::kV : Pipe::kMte3; }

// Source and destination pipes of a hardware event.
inline std::pair<Pipe, Pipe> EventPipes(AscendC::HardEvent e)
{
    using AscendC::HardEvent;
    switch (e) {
    case HardEvent::MTE2_V: return {Pipe::kMte2, Pipe::kV};
    case HardEvent::V_MTE2: return {Pipe::kV, Pipe::kMte2};
    case HardEvent::V_MTE3: return {Pipe::kV, Pipe::kMte3};
    case HardEvent::MTE3_V: return {Pipe::kMte3, Pipe::kV};
    case HardEvent::MTE2_S: return {Pipe::kMte2, Pipe::kS};
    case HardEvent::S_MTE2: return {Pipe::kS, Pipe::kMte2};
    case HardEvent::MTE3_S: return {Pipe::kMte3, Pipe::kS};
    case HardEvent::S_MTE3: return {Pipe::kS, Pipe::kMte3};
    case HardEvent::S_V: return {Pipe::kS, Pipe::kV};
    case HardEvent::V_S: return {Pipe::kV, Pipe::kS};
    case HardEvent::MTE2_MTE3: return {Pipe::kMte2, Pipe::kMte3};
    case HardEvent::MTE3_MTE2: return {Pipe::kMte3, Pipe::kMte2};
    }
    return {Pipe::kS, Pipe::kS};
}

// One scalar instruction (a flag, barrier or queue operation).
inline void ScalarStep(const char *api) { Instr(api, Pipe::kS).Done(1); }

inline std::string EventName(AscendC::HardEvent e)
{
    static const char *const names[] = {"MTE2_V", "V_MTE2", "V_MTE3", "MTE3_V", "MTE2_S", "S_MTE2",
                                        "MTE3_S", "S_MTE3", "S_V",    "V_S",    "MTE2_MTE3",
                                        "MTE3_MTE2"};
    return names[static_cast<int>(e)];
}

} // namespace ta_shim

namespace AscendC {

// The header's TQue<pos, depth, mask> (kernel_tpipe.h); the shim models
// mask = 0 (no ND/NZ conversion) only.
template <TPosition pos, int32_t depth, auto mask = 0>
class TQue {
public:
    static_assert(depth >= 1, "a queue holds at least one tensor");
    static_assert(pos == TPosition::VECIN || pos == TPosition::VECOUT,
                  "the shim models vector queues (VECIN, VECOUT) only");
    static_assert(mask == 0, "the shim models TQue without ND/NZ conversion (mask 0) only");

    template <typename T>
    LocalTensor<T> AllocTensor()
    {
        using namespace ta_shim;
        CheckInit("AllocTensor");
        ScalarStep("AllocTensor");
        // Round robin from a cursor, as AscendC's TQueBind::AllocTensor
        // (asc-devkit impl/basic_api/kernel_tquebind_impl.h): double
        // buffering alternates buffers even when the older one is free.
        for (size_t k = 0; k < bufs_.size(); ++k) {
            BufferRec *b = bufs_[cursor_];
            cursor_ = (cursor_ + 1) % bufs_.size();
            if (b->state == BufState::kFree) {
                b->state = BufState::kAllocated;
                Core().tl.Receive(Producer(pos), b->freed);
                return Whole<T>(b);
            }
        }
        Violation(Severity::kFatal, "queue",
                  "AllocTensor on " + name_ + ": all " + std::to_string(bufs_.size()) +
                      " buffers are in use (a core would wait forever for a FreeTensor)");
        return {};
    }

    template <typename T>
    bool EnQue(const LocalTensor<T> &tensor)
    {
        using namespace ta_shim;
        CheckInit("EnQue");
        ScalarStep("EnQue");
        BufferRec *b = Own("EnQue", tensor.rec_);
        if (b->state != BufState::kAllocated) {
            Violation(Severity::kFatal, "queue",
                      "EnQue on " + name_ + ": " + b->name + " is " + StateName(b->state) +
                          ", not freshly allocated");
        }
        if (fifo_.size() >= static_cast<size_t>(depth)) {
            Violation(Severity::kFatal, "queue",
                      "EnQue on " + name_ + ": the queue already holds its depth of " +
                          std::to_string(depth) + " tensors");
        }
        b->state = BufState::kQueued;
        b->enqueued = Core().tl.Snapshot(Producer(pos));
        fifo_.push_back(b);
        return true;
    }

    template <typename T>
    LocalTensor<T> DeQue()
    {
        using namespace ta_shim;
        CheckInit("DeQue");
        ScalarStep("DeQue");
        if (fifo_.empty()) {
            Violation(Severity::kFatal, "queue",
                      "DeQue on " + name_ + ": the queue is empty (a core would wait forever)");
        }
        BufferRec *b = fifo_.front();
        fifo_.pop_front();
        b->state = BufState::kDequeued;
        Core().tl.Receive(Consumer(pos), b->enqueued);
        return Whole<T>(b);
    }

    template <typename T>
    void FreeTensor(LocalTensor<T> &tensor)
    {
        using namespace ta_shim;
        CheckInit("FreeTensor");
        ScalarStep("FreeTensor");
        BufferRec *b = Own("FreeTensor", tensor.rec_);
        if (b->state != BufState::kAllocated && b->state != BufState::kDequeued) {
            Violation(Severity::kFatal, "queue",
                      "FreeTensor on " + name_ + ": " + b->name + " is " + StateName(b->state));
        }
        b->state = BufState::kFree;
        b->freed = Core().tl.Snapshot(Consumer(pos));
    }

    // Shim internals, set by TPipe::InitBuffer.
    std::vector<ta_shim::BufferRec *> bufs_;
    std::deque<ta_shim::BufferRec *> fifo_;
    size_t cursor_ = 0;
    std::string name_ = "an uninitialised TQue";

private:
    void CheckInit(const char *api) const
    {
        if (bufs_.empty()) {
            ta_shim::Violation(ta_shim::Severity::kFatal, "queue",
                               std::string(api) + " on a TQue before TPipe::InitBuffer");
        }
    }

    ta_shim::BufferRec *Own(const char *api, ta_shim::BufferRec *b) const
    {
        if (b == nullptr || std::find(bufs_.begin(), bufs_.end(), b) == bufs_.end()) {
            ta_shim::Violation(ta_shim::Severity::kFatal, "queue",
                               std::string(api) + " on " + name_ +
                                   ": the tensor was not allocated from this queue");
        }
        return b;
    }

    template <typename T>
    static LocalTensor<T> Whole(ta_shim::BufferRec *b)
    {
        LocalTensor<T> t;
        t.rec_ = b;
        t.size_ = b->bytes / static_cast<uint32_t>(sizeof(T));
        return t;
    }
};

// asc-devkit include/basic_api/kernel_tpipe.h declares Get<T>(), Get<T>(len)
// and GetWithOffset<T>(size, bufOffset) non-const (kernels/shim/HEADERS.md):
// a kernel that calls them through a const TBuf or from a const member
// function does not compile with CANN's compiler, so it does not compile
// here either.
template <TPosition pos = TPosition::VECCALC>
class TBuf {
public:
    template <typename T>
    LocalTensor<T> Get()
    {
        return Get<T>(rec_ == nullptr ? 0 : rec_->bytes / static_cast<uint32_t>(sizeof(T)));
    }

    template <typename T>
    LocalTensor<T> Get(uint32_t len)
    {
        return GetWithOffset<T>(len, 0);
    }

    // `size` elements from byte `bufOffset` of the buffer.
    template <typename T>
    LocalTensor<T> GetWithOffset(uint32_t size, uint32_t bufOffset)
    {
        if (rec_ == nullptr) {
            ta_shim::Violation(ta_shim::Severity::kFatal, "queue", "TBuf::Get before TPipe::InitBuffer");
        }
        if (uint64_t(bufOffset) + uint64_t(size) * sizeof(T) > rec_->bytes) {
            ta_shim::Violation(ta_shim::Severity::kFatal, "ub-bounds",
                               "TBuf::Get(" + std::to_string(size) + " elements at byte " +
                                   std::to_string(bufOffset) + ") on " + rec_->name + " of " +
                                   std::to_string(rec_->bytes) + " bytes");
        }
        LocalTensor<T> t;
        t.rec_ = rec_;
        t.byte_offset_ = bufOffset;
        t.size_ = size;
        return t;
    }

    ta_shim::BufferRec *rec_ = nullptr;
};

class TPipe {
public:
    TPipe()
    {
        prev_ = ta_shim::tls_pipe;
        ta_shim::tls_pipe = this;
    }

    ~TPipe()
    {
        ta_shim::tls_pipe = prev_;
        if (!ta_shim::Core().in_kernel || std::uncaught_exceptions() > 0) {
            return;
        }
        // A tensor still held at the end is a broken Alloc/EnQue/DeQue/Free
        // cycle; on the device the next kernel's pipe would not know it.
        for (const ta_shim::BufferRec &b : bufs_) {
            if (b.state == ta_shim::BufState::kAllocated || b.state == ta_shim::BufState::kQueued ||
                b.state == ta_shim::BufState::kDequeued) {
                try {
                    ta_shim::Violation(ta_shim::Severity::kRecorded, "queue",
                                       b.name + " is still " + ta_shim::StateName(b.state) +
                                           " when the kernel ends (missing FreeTensor)");
                } catch (...) {
                }
            }
        }
    }

    TPipe(const TPipe &) = delete;
    TPipe &operator=(const TPipe &) = delete;

    template <TPosition pos, int32_t depth, auto mask>
    bool InitBuffer(TQue<pos, depth, mask> &que, uint8_t num, uint32_t len)
    {
        if (!que.bufs_.empty()) {
            ta_shim::Violation(ta_shim::Severity::kFatal, "queue",
                               "InitBuffer called twice on " + que.name_);
        }
        if (num == 0 || len == 0) {
            ta_shim::Violation(ta_shim::Severity::kFatal, "queue",
                               "InitBuffer with " + std::to_string(num) + " buffers of " +
                                   std::to_string(len) + " bytes");
        }
        const std::string qname = std::string(pos == TPosition::VECIN ? "VECIN" : "VECOUT") +
                                  " queue #" + std::to_string(++queues_);
        que.name_ = qname;
        for (uint8_t i = 0; i < num; ++i) {
            ta_shim::BufferRec *b = Carve(len, qname + " buffer " + std::to_string(i));
            b->pos = pos;
            b->state = ta_shim::BufState::kFree;
            b->owner = &que;
            que.bufs_.push_back(b);
        }
        return true;
    }

    template <TPosition pos>
    bool InitBuffer(TBuf<pos> &buf, uint32_t len)
    {
        if (buf.rec_ != nullptr) {
            ta_shim::Violation(ta_shim::Severity::kFatal, "queue", "InitBuffer called twice on a TBuf");
        }
        if (len == 0) {
            ta_shim::Violation(ta_shim::Severity::kFatal, "queue", "InitBuffer on a TBuf with 0 bytes");
        }
        buf.rec_ = Carve(len, "TBuf #" + std::to_string(++tbufs_));
        buf.rec_->pos = pos;
        buf.rec_->owner = &buf;
        return true;
    }

    TEventID FetchEventID(HardEvent) { return 0; }

    template <HardEvent evt>
    TEventID AllocEventID()
    {
        return 0;
    }

    template <HardEvent evt>
    void ReleaseEventID(TEventID)
    {
    }

    void Destroy() {}

private:
    // Carves `len` bytes, rounded up to 32 as the device does, from the UB.
    ta_shim::BufferRec *Carve(uint32_t len, const std::string &name)
    {
        ta_shim::CoreState &c = ta_shim::Core();
        const uint32_t bytes = ta_shim::AlignUp(len, ta_shim::kBlockBytes);
        if (uint64_t(c.ub_allocated) + bytes > c.ub_capacity) {
            ta_shim::Violation(ta_shim::Severity::kFatal, "ub-capacity",
                               "InitBuffer for " + name + " needs " + std::to_string(bytes) +
                                   " bytes but only " +
                                   std::to_string(c.ub_capacity - c.ub_allocated) + " of the " +
                                   std::to_string(c.ub_capacity) + "-byte Unified Buffer are left");
        }
        bufs_.emplace_back();
        ta_shim::BufferRec &b = bufs_.back();
        b.offset = c.ub_allocated;
        b.bytes = bytes;
        b.name = name;
        c.ub_allocated += bytes;
        return &b;
    }

    std::deque<ta_shim::BufferRec> bufs_;
    TPipe *prev_ = nullptr;
    int queues_ = 0;
    int tbufs_ = 0;
};

inline TPipe *GetTPipePtr() { return ta_shim::tls_pipe; }

template <HardEvent evt>
void SetFlag(int32_t eventID)
{
    ta_shim::ScalarStep("SetFlag");
    ta_shim::CoreState &c = ta_shim::Core();
    const uint32_t key = (static_cast<uint32_t>(evt) << 8) | (eventID & 0xFF);
    c.flags.emplace_back(key, c.tl.Snapshot(ta_shim::EventPipes(evt).first));
}

template <HardEvent evt>
void WaitFlag(int32_t eventID)
{
    ta_shim::ScalarStep("WaitFlag");
    ta_shim::CoreState &c = ta_shim::Core();
    const uint32_t key = (static_cast<uint32_t>(evt) << 8) | (eventID & 0xFF);
    auto it = std::find_if(c.flags.begin(), c.flags.end(), [&](const auto &f) { return f.first == key; });
    if (it == c.flags.end()) {
        ta_shim::Violation(ta_shim::Severity::kFatal, "sync",
                           "WaitFlag<HardEvent::" + ta_shim::EventName(evt) + ">(" +
                               std::to_string(eventID) +
                               ") with no matching SetFlag (a core would wait forever)");
    }
    const ta_shim::SyncToken token = it->second;
    c.flags.erase(it);
    c.tl.Receive(ta_shim::EventPipes(evt).second, token);
}

// PIPE_V: later vector instructions see everything earlier ones read and
// wrote. PIPE_ALL: every pipe waits for every other. Barriers on the
// scalar and MTE pipes order nothing more than their in-order execution.
template <pipe_t pipe>
void PipeBarrier()
{
    using ta_shim::Pipe;
    ta_shim::ScalarStep("PipeBarrier");
    ta_shim::Timeline &tl = ta_shim::Core().tl;
    if (pipe == PIPE_V) {
        tl.Receive(Pipe::kV, tl.Snapshot(Pipe::kV));
    } else if (pipe == PIPE_ALL) {
        ta_shim::SyncToken all;
        for (int p = 0; p < ta_shim::kPipes; ++p) {
            const ta_shim::SyncToken t = tl.Snapshot(static_cast<Pipe>(p));
            all.clock.Join(t.clock);
            all.time = std::max(all.time, t.time);
        }
        for (int p = 0; p < ta_shim::kPipes; ++p) {
            tl.Receive(static_cast<Pipe>(p), all);
        }
    }
}

} // namespace AscendC

#endif // TA_SHIM_PIPE_H
