// DataCopy and DataCopyPad between global memory and the Unified Buffer.
//
// DataCopy moves whole 32-byte blocks: a length that is not a multiple of 32
// bytes is rounded down, as on the device, and recorded, so a forgotten tail
// shows both as a wrong result and in the violation report. DataCopyPad
// (Atlas A2/A3) moves exact byte counts. GM->UB copies run on MTE2, UB->GM
// copies on MTE3; the cost model charges them the bytes moved over the
// core's share of the measured read or write bandwidth (cost.h).
#ifndef TA_SHIM_COPY_H
#define TA_SHIM_COPY_H

#include <cstdint>
#include <cstring>
#include <string>

#include "state.h"
#include "tensor.h"

namespace AscendC {

struct DataCopyExtParams {
    DataCopyExtParams() {}
    DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn,
                      const uint32_t dstStrideIn, const uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn),
          rsv(rsvIn)
    {
    }
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;   // bytes
    uint32_t srcStride = 0;  // GM side: bytes; UB side: 32-byte blocks
    uint32_t dstStride = 0;  // GM side: bytes; UB side: 32-byte blocks
    uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    DataCopyPadExtParams() {}
    DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue,
                         const uint8_t rightPadValue, T padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue),
          paddingValue(padValue)
    {
    }
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    T paddingValue = T();
};

} // namespace AscendC

namespace ta_shim {

// DataCopyPad limits on A2/A3: 12-bit block count, 21-bit block length.
constexpr uint32_t kMaxPadBlockCount = 4095;
constexpr uint32_t kMaxPadBlockLen = 2097151;

inline uint64_t RoundedCopyBytes(const char *api, uint64_t count, size_t elem)
{
    const uint64_t bytes = count * elem;
    if (count == 0) {
        Violation(Severity::kRecorded, "datacopy-length", std::string(api) + " of 0 elements");
    }
    if (bytes % kBlockBytes != 0) {
        Violation(Severity::kRecorded, "datacopy-length",
                  std::string(api) + " of " + std::to_string(count) + " elements = " +
                      std::to_string(bytes) +
                      " bytes, not a multiple of 32: the device copies only " +
                      std::to_string(bytes / kBlockBytes * kBlockBytes) +
                      " bytes (use DataCopyPad for the tail)");
    }
    return bytes / kBlockBytes * kBlockBytes;
}

inline void CheckPadParams(const char *api, const AscendC::DataCopyExtParams &p, size_t elem)
{
    if (p.blockCount > kMaxPadBlockCount || p.blockLen > kMaxPadBlockLen) {
        Violation(Severity::kFatal, "datacopy-length",
                  std::string(api) + ": blockCount " + std::to_string(p.blockCount) +
                      " and blockLen " + std::to_string(p.blockLen) +
                      " must lie in [0, 4095] and [0, 2097151] bytes");
    }
    if (p.blockLen % elem != 0) {
        Violation(Severity::kFatal, "datacopy-length",
                  std::string(api) + ": blockLen " + std::to_string(p.blockLen) +
                      " bytes is not a whole number of elements");
    }
}

// GM <-> UB copies go through queue buffers (VECIN or VECOUT) on A2/A3:
// the GM->UB and UB->GM DataCopyPad pages list GM->VECIN, GM->VECOUT,
// VECIN->GM and VECOUT->GM only (VECCALC is Ascend 950 only).
inline void CheckPosition(const char *api, const BufferRec *b)
{
    if (b->pos != AscendC::TPosition::VECIN && b->pos != AscendC::TPosition::VECOUT) {
        Violation(Severity::kRecorded, "position",
                  std::string(api) + " uses " + b->name +
                      ", but copies between GM and the UB go through VECIN or VECOUT queue buffers "
                      "on A2/A3, not VECCALC");
    }
}

// MTE cycles of a transfer of `bytes` over the core's share of the read
// (MTE2) or write (MTE3) bandwidth (cost.h).
inline double CopyCycles(uint64_t bytes, bool write)
{
    const Timeline &tl = Core().tl;
    return static_cast<double>(bytes) / (write ? tl.write_bytes_per_cycle : tl.read_bytes_per_cycle);
}

} // namespace ta_shim

namespace AscendC {

template <typename T>
void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const uint32_t calCount)
{
    using namespace ta_shim;
    const Instr ins("DataCopy GM->UB", Pipe::kMte2);
    const uint64_t bytes = RoundedCopyBytes(ins.api, calCount, sizeof(T));
    T *d = dst.Write(ins, "dst", bytes / sizeof(T));
    CheckPosition(ins.api, dst.rec_);
    const T *s = src.Use(ins.api, bytes / sizeof(T), false);
    std::memcpy(d, s, bytes);
    ins.Done(CopyCycles(bytes, false), bytes);
}

template <typename T>
void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const uint32_t calCount)
{
    using namespace ta_shim;
    const Instr ins("DataCopy UB->GM", Pipe::kMte3);
    const uint64_t bytes = RoundedCopyBytes(ins.api, calCount, sizeof(T));
    const T *s = src.Read(ins, "src", bytes / sizeof(T));
    CheckPosition(ins.api, src.rec_);
    T *d = dst.Use(ins.api, bytes / sizeof(T), true);
    std::memcpy(d, s, bytes);
    ins.Done(CopyCycles(bytes, true), bytes);
}

// Each GM block of blockLen bytes lands on its own 32-byte-aligned UB block;
// the bytes after it up to the next 32-byte boundary get paddingValue when
// isPad is set, and otherwise the block's first element repeated (the
// "dummy" data of the GM->UB DataCopyPad page, for left and right padding
// of 0). A blockCount or blockLen of 0 makes the copy a no-op on A2/A3 (same
// page).
template <typename T>
void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src,
                 const DataCopyExtParams &params, const DataCopyPadExtParams<T> &padParams)
{
    using namespace ta_shim;
    const Instr ins("DataCopyPad GM->UB", Pipe::kMte2);
    if (params.blockCount == 0 || params.blockLen == 0) {
        ins.Done(0);
        return;
    }
    CheckPadParams(ins.api, params, sizeof(T));
    if (padParams.leftPadding != 0 || padParams.rightPadding != 0) {
        Violation(Severity::kFatal, "unsupported",
                  std::string(ins.api) + ": left/right padding is not modelled by the shim");
    }
    const uint32_t ub_block = AlignUp(params.blockLen, kBlockBytes) + params.dstStride * kBlockBytes;
    const uint64_t gm_block = uint64_t(params.blockLen) + params.srcStride;
    const uint64_t ub_bytes = uint64_t(ub_block) * (params.blockCount - 1) +
                              AlignUp(params.blockLen, kBlockBytes);
    const uint64_t gm_elems = (gm_block * (params.blockCount - 1) + params.blockLen) / sizeof(T);
    uint8_t *d = reinterpret_cast<uint8_t *>(dst.Write(ins, "dst", ub_bytes / sizeof(T)));
    CheckPosition(ins.api, dst.rec_);
    const uint8_t *s = reinterpret_cast<const uint8_t *>(src.Use(ins.api, gm_elems, false));
    for (uint32_t b = 0; b < params.blockCount; ++b) {
        uint8_t *row = d + uint64_t(b) * ub_block;
        std::memcpy(row, s + b * gm_block, params.blockLen);
        const uint32_t tail = AlignUp(params.blockLen, kBlockBytes) - params.blockLen;
        const uint8_t *fill = padParams.isPad ? reinterpret_cast<const uint8_t *>(&padParams.paddingValue) : row;
        for (uint32_t k = 0; k < tail / sizeof(T); ++k) {
            std::memcpy(row + params.blockLen + k * sizeof(T), fill, sizeof(T));
        }
    }
    const uint64_t bytes = uint64_t(params.blockLen) * params.blockCount;
    ins.Done(CopyCycles(bytes, false), bytes);
}

template <typename T>
void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &params)
{
    using namespace ta_shim;
    const Instr ins("DataCopyPad UB->GM", Pipe::kMte3);
    const char *api = ins.api;
    if (params.blockCount == 0 || params.blockLen == 0) {
        ins.Done(0);
        return;
    }
    CheckPadParams(api, params, sizeof(T));
    const uint32_t ub_block = AlignUp(params.blockLen, kBlockBytes) + params.srcStride * kBlockBytes;
    const uint64_t gm_block = uint64_t(params.blockLen) + params.dstStride;
    const uint64_t ub_bytes = uint64_t(ub_block) * (params.blockCount - 1) + params.blockLen;
    const uint64_t gm_elems = (gm_block * (params.blockCount - 1) + params.blockLen) / sizeof(T);
    const uint8_t *s =
        reinterpret_cast<const uint8_t *>(src.Read(ins, "src", AlignUp(ub_bytes, sizeof(T)) / sizeof(T)));
    CheckPosition(api, src.rec_);
    uint8_t *d = reinterpret_cast<uint8_t *>(dst.Use(api, gm_elems, true));
    for (uint32_t b = 0; b < params.blockCount; ++b) {
        std::memcpy(d + b * gm_block, s + uint64_t(b) * ub_block, params.blockLen);
    }
    const uint64_t bytes = uint64_t(params.blockLen) * params.blockCount;
    ins.Done(CopyCycles(bytes, true), bytes);
}

} // namespace AscendC

#endif // TA_SHIM_COPY_H
