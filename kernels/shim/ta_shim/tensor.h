// GlobalTensor and LocalTensor, with the checks every operand goes through.
#ifndef TA_SHIM_TENSOR_H
#define TA_SHIM_TENSOR_H

#include <cstdint>
#include <string>

#include "buffer.h"
#include "state.h"
#include "types.h"

namespace AscendC {

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

// One instruction being executed: its pipe, its sequence number and the
// UB bytes it touches (recorded for the sync rule when it completes) and,
// once done, its cycles.
struct Instr {
    struct Touch {
        BufferRec *rec;
        uint32_t lo;
        uint32_t hi;
        bool write;
    };
    static constexpr int kMaxTouches = 8;

    const char *api;
    Pipe pipe;
    uint64_t seq;
    mutable Touch touches[kMaxTouches];
    mutable int count = 0;

    Instr(const char *name, Pipe p) : api(name), pipe(p), seq(Core().tl.Begin(p)) {}

    void Touched(BufferRec *rec, uint32_t lo, uint32_t hi, bool write) const
    {
        if (count == kMaxTouches) {
            Violation(Severity::kFatal, "unsupported", std::string(api) + ": too many operands for the shim");
        }
        touches[count++] = {rec, lo, hi, write};
    }

    // Records the bytes touched and charges `cycles` of work on the pipe
    // (`gm_bytes` of them on the core's global-memory link).
    void Done(double cycles, uint64_t gm_bytes = 0) const
    {
        for (int i = 0; i < count; ++i) {
            RecordBytes(touches[i].rec, touches[i].lo, touches[i].hi, pipe, seq, touches[i].write);
        }
        Core().tl.Finish(pipe, cycles, gm_bytes);
    }
};

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

    // Checks that `count` elements from the tensor start may be read (or
    // written) by instruction `ins`, records the access, and returns them.
    T *Use(const ta_shim::Instr &ins, const char *role, uint64_t count, bool write) const
    {
        using namespace ta_shim;
        const char *api = ins.api;
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
        if (ins.pipe != Pipe::kS && address % kBlockBytes != 0) {
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
        CheckBytes(c.tl, rec_, byte_offset_, static_cast<uint32_t>(end), ins.pipe, write, api, role);
        ins.Touched(rec_, byte_offset_, static_cast<uint32_t>(end), write);
        return reinterpret_cast<T *>(c.ub.get() + address);
    }

    const T *Read(const ta_shim::Instr &ins, const char *role, uint64_t count) const
    {
        return Use(ins, role, count, false);
    }

    T *Write(const ta_shim::Instr &ins, const char *role, uint64_t count) const
    {
        return Use(ins, role, count, true);
    }

private:
    // One scalar load or store: one scalar instruction.
    T *Element(const char *api, uint32_t index, bool write) const
    {
        using namespace ta_shim;
        Instr ins(api, Pipe::kS);
        if (index >= size_) {
            Violation(Severity::kFatal, "ub-bounds",
                      std::string(api) + "(" + std::to_string(index) + ") on a tensor of " +
                          std::to_string(size_) + " elements");
        }
        T *p = (*this)[index].Use(ins, "the element", 1, write);
        ins.Done(1);
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

    // Non-const, as kernel_tensor.h declares it.
    void SetValue(uint64_t index, T value)
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
