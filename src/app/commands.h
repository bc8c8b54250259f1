// One function per subcommand; each gets argv with argv[0] = the subcommand name and returns the
// process exit code. Errors are thrown as zt::Error and reported by main().
#pragma once

namespace zt {

int cmd_init(int argc, char** argv);
int cmd_prepare_data(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_estimate(int argc, char** argv);
int cmd_consolidate(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_import(int argc, char** argv);
int cmd_report(int argc, char** argv);

}  // namespace zt
