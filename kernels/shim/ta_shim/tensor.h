// GlobalTensor and LocalTensor, with the checks every operand goes through.
#ifndef TA_SHIM_TENSOR_H
#define TA_SHIM_TENSOR_H

#include <cstdint>
#include <string>

#include "state.h"
#include "types.h"

namespace AscendC {

enum class TPosition : uint8_t { GM, VECIN, VECOUT, VECCALC };
using QuePosition = TPosition;

template <typename T, typename U>
struct IsSameType {
    static constexpr bool value = false;
};
template <typename T>
struct IsSameType<T, T> {
    static constexpr bool value = true;
};

inline int64_t GetBlockIdx() { return ta_shim::Core().block_idx; }
inline int64_t GetBlockNum() { return ta_shim::Core().block_num; }

} // namespace AscendC

namespace ta_shim {

enum class BufState : uint8_t {
    kFree,      // queue buffer not handed out
    kAllocated, // AllocTensor'd, not yet EnQue'd
    kQueued,    // EnQue'd, waiting for DeQue
    kDequeued,  // DeQue'd, waiting for FreeTensor
    kScratch,   // TBuf memory: always usable
};

// One buffer carved out of the UB by TPipe::InitBuffer.
struct BufferRec {
    uint32_t offset = 0; // from the UB start
    uint32_t bytes = 0;
    AscendC::TPosition pos = AscendC::TPosition::VECCALC;
    BufState state = BufState::kScratch;
    const void *owner = nullptr; // the TQue or TBuf
    std::string name;
    // Synchronisation epochs of the last scalar write and vector use.
    uint64_t scalar_epoch = 0;
    uint64_t vector_epoch = 0;
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

enum class Unit : uint8_t { kScalar, kVector, kMte };

} // namespace ta_shim

namespace AscendC {

template <typename T>
class LocalTensor {
public:
    LocalTensor() = default;

    T GetValue(uint32_t index) const
    {
        return *Element("GetValue", index, false);
    }

    void SetValue(uint32_t index, T value) const
    {
        *Element("SetValue", index, true) = value;
    }

    LocalTensor operator[](uint32_t offset) const
    {
        LocalTensor t = *this;
        t.byte_offset_ += offset * static_cast<uint32_t>(sizeof(T));
        t.size_ = offset < size_ ? size_ - offset : 0;
        return t;
    }

    template <typename U>
    LocalTensor<U> ReinterpretCast() const
    {
        LocalTensor<U> t;
        t.rec_ = rec_;
        t.byte_offset_ = byte_offset_;
        t.size_ = static_cast<uint32_t>(uint64_t(size_) * sizeof(T) / sizeof(U));
        return t;
    }

    uint32_t GetSize() const { return size_; }

    // Shim internals: the buffer, the byte offset inside it, the element count.
    ta_shim::BufferRec *rec_ = nullptr;
    uint32_t byte_offset_ = 0;
    uint32_t size_ = 0;

    // Checks that `count` elements from the tensor start may be used by
    // `unit` inside `api`, and returns them.
    T *Use(const char *api, const char *role, uint64_t count, ta_shim::Unit unit) const
    {
        using namespace ta_shim;
        if (rec_ == nullptr) {
            Violation(Severity::kFatal, "queue", std::string(api) + ": " + role +
                                                     " is a LocalTensor that was never allocated");
        }
        if (rec_->state != BufState::kAllocated && rec_->state != BufState::kDequeued &&
            rec_->state != BufState::kScratch) {
            Violation(Severity::kFatal, "queue",
                      std::string(api) + ": " + role + " (" + rec_->name + ") is " +
                          StateName(rec_->state));
        }
        const uint32_t address = rec_->offset + byte_offset_;
        if (unit != Unit::kScalar && address % kBlockBytes != 0) {
            Violation(Severity::kFatal, "ub-alignment",
                      std::string(api) + ": " + role + " starts at UB byte " +
                          std::to_string(address) + " (" + rec_->name + " + " +
                          std::to_string(byte_offset_) + "), not a multiple of 32");
        }
        const uint64_t end = uint64_t(byte_offset_) + count * sizeof(T);
        if (end > rec_->bytes) {
            Violation(Severity::kFatal, "ub-bounds",
                      std::string(api) + ": " + role + " needs bytes [" +
                          std::to_string(byte_offset_) + ", " + std::to_string(end) + ") of " +
                          rec_->name + ", which has " + std::to_string(rec_->bytes));
        }
        CoreState &c = Core();
        if (unit == Unit::kVector) {
            if (rec_->scalar_epoch == c.sv_epoch) {
                Violation(Severity::kRecorded, "sync",
                          std::string(api) + ": " + role + " (" + rec_->name +
                              ") was written by the scalar unit (SetValue) with no "
                              "SetFlag/WaitFlag<HardEvent::S_V> since");
            }
            rec_->vector_epoch = c.vs_epoch;
        } else if (unit == Unit::kScalar) {
            if (rec_->vector_epoch == c.vs_epoch) {
                Violation(Severity::kRecorded, "sync",
                          std::string(api) + ": " + role + " (" + rec_->name +
                              ") is used by vector instructions with no "
                              "SetFlag/WaitFlag<HardEvent::V_S> since");
            }
        }
        return reinterpret_cast<T *>(c.ub.get() + address);
    }

private:
    T *Element(const char *api, uint32_t index, bool write) const
    {
        using namespace ta_shim;
        if (index >= size_) {
            Violation(Severity::kFatal, "ub-bounds",
                      std::string(api) + "(" + std::to_string(index) + ") on a tensor of " +
                          std::to_string(size_) + " elements");
        }
        T *p = (*this)[index].Use(api, "the element", 1, Unit::kScalar);
        if (write) {
            rec_->scalar_epoch = Core().sv_epoch;
        }
        return p;
    }
};

template <typename T>
class GlobalTensor {
public:
    GlobalTensor() = default;

    // The shim needs the size: every copy is checked against it.
    void SetGlobalBuffer(__gm__ T *buffer, uint64_t bufferSize)
    {
        base_ = buffer;
        size_ = bufferSize;
        offset_ = 0;
    }

    GlobalTensor operator[](uint64_t offset) const
    {
        GlobalTensor t = *this;
        t.offset_ += offset;
        return t;
    }

    uint64_t GetSize() const { return size_; }

    T GetValue(uint64_t index) const { return *(*this)[index].Use("GlobalTensor::GetValue", 1, false); }

    void SetValue(uint64_t index, T value) const
    {
        *(*this)[index].Use("GlobalTensor::SetValue", 1, true) = value;
    }

    // Shim internals: checks `count` elements from here against the bounds
    // given to SetGlobalBuffer and logs the access for the cross-core check.
    T *Use(const char *api, uint64_t count, bool write) const
    {
        using namespace ta_shim;
        if (base_ == nullptr) {
            Violation(Severity::kFatal, "gm-bounds",
                      std::string(api) + ": GlobalTensor used before SetGlobalBuffer");
        }
        if (offset_ > size_ || count > size_ - offset_) {
            Violation(Severity::kFatal, "gm-bounds",
                      std::string(api) + ": elements [" + std::to_string(offset_) + ", " +
                          std::to_string(offset_ + count) +
                          ") lie outside the GlobalTensor of " + std::to_string(size_) +
                          " elements");
        }
        T *p = base_ + offset_;
        if (count > 0) {
            const uintptr_t lo = reinterpret_cast<uintptr_t>(p);
            Core().accesses.push_back({lo, lo + count * sizeof(T), Core().block_idx, write});
        }
        return p;
    }

private:
    T *base_ = nullptr;
    uint64_t size_ = 0;
    uint64_t offset_ = 0;
};

} // namespace AscendC

#endif // TA_SHIM_TENSOR_H
