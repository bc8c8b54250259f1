#include "app/cli.h"

#include <filesystem>
#include <fstream>
#include <iostream>

#include "util/error.h"

namespace zt {

bool parse_command_line(const CommandSpec& spec, po::options_description& options,
                        const po::positional_options_description* positional, int argc, char** argv,
                        po::variables_map& vm) {
  po::options_description common("Common options");
  common.add_options()("help,h", "print this help")(
      "config", po::value<std::string>(), "INI file with the same keys as the long options");
  po::options_description all;
  all.add(options).add(common);
  try {
    po::command_line_parser parser(argc, argv);
    parser.options(all);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: " << spec.usage << "\n\n" << spec.summary << "\n\n" << all << "\n";
      return false;
    }
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream in(path);
      ZT_CHECK(in.good(), spec.name + ": cannot open config file '" + path + "'");
      // Command-line values were stored first, so they win over the file.
      po::store(po::parse_config_file(in, options, /*allow_unregistered=*/false), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    fail(spec.name + ": " + e.what() + " (see 'zerotrain " + spec.name + " --help')");
  }
  return true;
}

po::typed_value<bool>* bool_flag(bool* target, bool fallback) {
  return po::value<bool>(target)->default_value(fallback)->implicit_value(true);
}

void require_option(const po::variables_map& vm, const std::string& name,
                    const std::string& command) {
  ZT_CHECK(vm.count(name) > 0, command + ": missing required option '--" + name + "'");
}

void check_output_dir(const std::string& path, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec))
    fail("output path '" + path + "' exists and is not a directory");
  if (fs::is_directory(path, ec) && !fs::is_empty(path, ec) && !overwrite)
    fail("output directory '" + path + "' exists and is not empty (use --overwrite)");
}

}  // namespace zt
