// Provenance of a run's results: see provenance.hpp. SHA-256 by OpenSSL's libcrypto (EVP).
#include "provenance.hpp"

#include "strata/errors.hpp"
#include "strata_git_revision.hpp"  // generated at build time (cmake/git_revision.cmake)

#include <openssl/evp.h>

#include <array>
#include <fstream>
#include <memory>

namespace strata::cli {

namespace {

std::string sha256_of(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw InputError(file.string() + ": cannot be read to hash it for the results' provenance");
    const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
        throw Error("sha256: OpenSSL init failed");
    std::array<char, 1 << 16> buf{};
    while (in) {
        in.read(buf.data(), buf.size());
        const auto n = static_cast<std::size_t>(in.gcount());
        if (n > 0 && EVP_DigestUpdate(ctx.get(), buf.data(), n) != 1)
            throw Error("sha256: OpenSSL update failed");
    }
    std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx.get(), digest.data(), &len) != 1) throw Error("sha256: OpenSSL final failed");
    static constexpr char kHex[] = "0123456789abcdef";
    std::string hex;
    for (unsigned int i = 0; i < len; ++i) {
        hex += kHex[digest[i] >> 4];
        hex += kHex[digest[i] & 15];
    }
    return hex;
}

}  // namespace

Provenance provenance_of(const std::vector<std::filesystem::path>& inputs) {
    Provenance p;
    p.strata_version = STRATA_VERSION;
    p.git_revision = STRATA_GIT_REVISION;
    for (const auto& f : inputs)
        p.inputs.push_back({f.string(), sha256_of(f)});
    return p;
}

}  // namespace strata::cli
