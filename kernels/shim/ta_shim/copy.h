// DataCopy and DataCopyPad between global memory and the Unified Buffer.
//
// DataCopy moves whole 32-byte blocks: a length that is not a multiple of 32
// bytes is rounded down, as on the device, and recorded, so a forgotten tail
// shows both as a wrong result and in the violation report. DataCopyPad
// (Atlas A2/A3) moves exact byte counts.
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
    if (p.blockCount == 0 || p.blockCount > kMaxPadBlockCount || p.blockLen == 0 ||
        p.blockLen > kMaxPadBlockLen) {
        Violation(Severity::kFatal, "datacopy-length",
                  std::string(api) + ": blockCount " + std::to_string(p.blockCount) +
                      " and blockLen " + std::to_string(p.blockLen) +
                      " must lie in [1, 4095] and [1, 2097151] bytes");
    }
    if (p.blockLen % elem != 0) {
        Violation(Severity::kFatal, "datacopy-length",
                  std::string(api) + ": blockLen " + std::to_string(p.blockLen) +
                      " bytes is not a whole number of elements");
    }
}

inline void CheckPosition(const char *api, const BufferRec *b, AscendC::TPosition want)
{
    if (b->pos != want) {
        Violation(Severity::kRecorded, "position",
                  std::string(api) + " uses " + b->name + ", but " +
                      (want == AscendC::TPosition::VECIN
                           ? "copies into the UB go through a VECIN queue (its EnQue/DeQue "
                             "orders MTE2 before the vector unit)"
                           : "copies out of the UB go through a VECOUT queue (its EnQue/DeQue "
                             "orders the vector unit before MTE3)"));
    }
}

} // namespace ta_shim

namespace AscendC {

template <typename T>
void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const uint32_t calCount)
{
    using namespace ta_shim;
    const uint64_t bytes = RoundedCopyBytes("DataCopy GM->UB", calCount, sizeof(T));
    T *d = dst.Use("DataCopy GM->UB", "dst", bytes / sizeof(T), Unit::kMte);
    CheckPosition("DataCopy GM->UB", dst.rec_, TPosition::VECIN);
    const T *s = src.Use("DataCopy GM->UB", bytes / sizeof(T), false);
    std::memcpy(d, s, bytes);
}

template <typename T>
void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const uint32_t calCount)
{
    using namespace ta_shim;
    const uint64_t bytes = RoundedCopyBytes("DataCopy UB->GM", calCount, sizeof(T));
    const T *s = src.Use("DataCopy UB->GM", "src", bytes / sizeof(T), Unit::kMte);
    CheckPosition("DataCopy UB->GM", src.rec_, TPosition::VECOUT);
    T *d = dst.Use("DataCopy UB->GM", bytes / sizeof(T), true);
    std::memcpy(d, s, bytes);
}

// Each GM block of blockLen bytes lands on its own 32-byte-aligned UB block;
// the bytes after it up to the next 32-byte boundary get paddingValue when
// isPad is set and are left undefined (0xFF here) otherwise.
template <typename T>
void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src,
                 const DataCopyExtParams &params, const DataCopyPadExtParams<T> &padParams)
{
    using namespace ta_shim;
    const char *api = "DataCopyPad GM->UB";
    CheckPadParams(api, params, sizeof(T));
    if (padParams.leftPadding != 0 || padParams.rightPadding != 0) {
        Violation(Severity::kFatal, "unsupported",
                  std::string(api) + ": left/right padding is not modelled by the shim");
    }
    const uint32_t ub_block = AlignUp(params.blockLen, kBlockBytes) + params.dstStride * kBlockBytes;
    const uint64_t gm_block = uint64_t(params.blockLen) + params.srcStride;
    const uint64_t ub_bytes = uint64_t(ub_block) * (params.blockCount - 1) +
                              AlignUp(params.blockLen, kBlockBytes);
    const uint64_t gm_elems = (gm_block * (params.blockCount - 1) + params.blockLen) / sizeof(T);
    uint8_t *d = reinterpret_cast<uint8_t *>(dst.Use(api, "dst", ub_bytes / sizeof(T), Unit::kMte));
    CheckPosition(api, dst.rec_, TPosition::VECIN);
    const uint8_t *s = reinterpret_cast<const uint8_t *>(src.Use(api, gm_elems, false));
    for (uint32_t b = 0; b < params.blockCount; ++b) {
        uint8_t *row = d + uint64_t(b) * ub_block;
        std::memcpy(row, s + b * gm_block, params.blockLen);
        const uint32_t tail = AlignUp(params.blockLen, kBlockBytes) - params.blockLen;
        if (padParams.isPad) {
            for (uint32_t k = 0; k < tail / sizeof(T); ++k) {
                std::memcpy(row + params.blockLen + k * sizeof(T), &padParams.paddingValue, sizeof(T));
            }
        } else {
            std::memset(row + params.blockLen, 0xFF, tail);
        }
    }
}

template <typename T>
void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &params)
{
    using namespace ta_shim;
    const char *api = "DataCopyPad UB->GM";
    CheckPadParams(api, params, sizeof(T));
    const uint32_t ub_block = AlignUp(params.blockLen, kBlockBytes) + params.srcStride * kBlockBytes;
    const uint64_t gm_block = uint64_t(params.blockLen) + params.dstStride;
    const uint64_t ub_bytes = uint64_t(ub_block) * (params.blockCount - 1) + params.blockLen;
    const uint64_t gm_elems = (gm_block * (params.blockCount - 1) + params.blockLen) / sizeof(T);
    const uint8_t *s =
        reinterpret_cast<const uint8_t *>(src.Use(api, "src", AlignUp(ub_bytes, sizeof(T)) / sizeof(T), Unit::kMte));
    CheckPosition(api, src.rec_, TPosition::VECOUT);
    uint8_t *d = reinterpret_cast<uint8_t *>(dst.Use(api, gm_elems, true));
    for (uint32_t b = 0; b < params.blockCount; ++b) {
        std::memcpy(d + b * gm_block, s + uint64_t(b) * ub_block, params.blockLen);
    }
}

} // namespace AscendC

#endif // TA_SHIM_COPY_H
