// zt_gguf_dequant FILE.gguf OUT_DIR: every tensor of a GGUF file as zerotrain's reader
// dequantizes it (io/gguf_file.h), written as OUT_DIR/<tensor name>.f32 (raw little-endian fp32,
// GGUF's element order), for test_gguf.py to compare bit for bit with the gguf package's own.
#include <fstream>
#include <iostream>
#include <vector>

#include "io/gguf_file.h"
#include "util/error.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: zt_gguf_dequant FILE.gguf OUT_DIR\n";
    return 2;
  }
  try {
    const zt::GgufReader gguf(argv[1]);
    for (const zt::GgufTensorInfo& t : gguf.tensors()) {
      std::vector<float> values(static_cast<size_t>(t.numel));
      gguf.read_rows(t, 0, t.rows(), values.data());
      std::ofstream out(std::string(argv[2]) + "/" + t.name + ".f32", std::ios::binary);
      out.write(reinterpret_cast<const char*>(values.data()),
                static_cast<std::streamsize>(values.size() * sizeof(float)));
      ZT_CHECK(out.good(), std::string("cannot write into ") + argv[2]);
    }
  } catch (const std::exception& e) {
    std::cerr << "zt_gguf_dequant: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
