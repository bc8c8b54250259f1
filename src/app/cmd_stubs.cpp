// Temporary: subcommands not implemented yet. Each file that implements one removes it here.
#include "app/commands.h"
#include "util/error.h"

namespace zt {
int cmd_init(int, char**) { fail("init: not implemented yet"); }
int cmd_prepare_data(int, char**) { fail("prepare-data: not implemented yet"); }
int cmd_info(int, char**) { fail("info: not implemented yet"); }
int cmd_train(int, char**) { fail("train: not implemented yet"); }
int cmd_eval(int, char**) { fail("eval: not implemented yet"); }
}  // namespace zt
