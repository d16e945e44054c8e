// Runs a fuzz target's LLVMFuzzerTestOneInput once on each file given (or
// each file in each directory given, in name order), without libFuzzer: the
// committed regression corpus replayed by ctest in every build, with any
// compiler. A crash or an oracle's abort fails the run; the name of the
// input being run is printed first.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg = argv[i];
    if (fs::is_directory(arg)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(arg))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else {
      inputs.push_back(arg);
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s FILE|DIR...  (no inputs found)\n", argv[0]);
    return 2;
  }
  for (const fs::path& in : inputs) {
    std::ifstream f(in, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "cannot read %s\n", in.c_str());
      return 2;
    }
    const std::string bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    std::fprintf(stderr, "replay %s (%zu bytes)\n", in.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs, none failed\n", inputs.size());
  return 0;
}
