// The pickle machine that reads torch.save's state dicts (src/io/torch_pickle.h), on pickles
// torch 1.13 wrote and on hostile ones: what it reads, and that everything else is an error,
// never a crash or a call.
#include <gtest/gtest.h>

#include <string>

#include "../support/error_text.h"
#include "io/torch_pickle.h"
#include "util/error.h"

namespace zt {
namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// torch.save({"w": torch.arange(12, dtype=torch.bfloat16)[2:8].view(2, 3).t()}) by torch 1.13:
// its data.pkl at the default protocol 2, and with pickle_protocol=4 (FRAME, MEMOIZE,
// SHORT_BINUNICODE, STACK_GLOBAL).
const std::string kProtocol2 = from_hex(
    "800263636f6c6c656374696f6e730a4f726465726564446963740a710029527101580100000077710263746f"
    "7263682e5f7574696c730a5f72656275696c645f74656e736f725f76320a71032828580700000073746f7261"
    "6765710463746f7263680a42466c6f6174313653746f726167650a7105580100000030710658030000006370"
    "7571074b0c747108514b024b034b028671094b014b0386710a8968002952710b74710c52710d732e");
const std::string kProtocol4 = from_hex(
    "8004959c000000000000008c0b636f6c6c656374696f6e73948c0b4f72646572656444696374949394295294"
    "8c0177948c0c746f7263682e5f7574696c73948c125f72656275696c645f74656e736f725f76329493942828"
    "8c0773746f72616765948c05746f726368948c0f42466c6f6174313653746f726167659493948c0130948c03"
    "637075944b0c7494514b024b034b0286944b014b03869489680229529474945294732e");

// torch 2's pickle of {"w": torch.nn.Parameter(torch.arange(6.).view(2, 3))} carrying Python
// attributes: _rebuild_from_type_v2(_rebuild_tensor_v2, Parameter, args, {}), written by torch
// 1.13's Pickler given that reduction (a reducer_override); and the same with the type
// collections.OrderedDict, which is no tensor's.
const std::string kFromTypeParameter = from_hex(
    "800263636f6c6c656374696f6e730a4f726465726564446963740a710029527101580100000077710263746f"
    "7263682e5f74656e736f720a5f72656275696c645f66726f6d5f747970655f76320a71032863746f7263682e"
    "5f7574696c730a5f72656275696c645f74656e736f725f76320a710463746f7263682e6e6e2e706172616d65"
    "7465720a506172616d657465720a71052828580700000073746f72616765710663746f7263680a466c6f6174"
    "53746f726167650a71075801000000307108580300000063707571094b0674710a514b004b024b0386710b4b"
    "034b0186710c8968002952710d74710e7d710f747110527111732e");
const std::string kFromTypeOrderedDict = from_hex(
    "800263636f6c6c656374696f6e730a4f726465726564446963740a710029527101580100000077710263746f"
    "7263682e5f74656e736f720a5f72656275696c645f66726f6d5f747970655f76320a71032863746f7263682e"
    "5f7574696c730a5f72656275696c645f74656e736f725f76320a710468002828580700000073746f72616765"
    "710563746f7263680a466c6f617453746f726167650a71065801000000307107580300000063707571084b06"
    "747109514b004b024b0386710a4b034b0186710b8968002952710c74710d7d710e74710f527110732e");

std::string refusal(const std::string& pickle) {
  return error_of([&] { read_torch_state_dict(pickle, "'f.bin'"); });
}

TEST(TorchPickle, ReadsTorchsStateDictAtProtocolsTwoAndFour) {
  for (const std::string* pickle : {&kProtocol2, &kProtocol4}) {
    const TorchStateDict d = read_torch_state_dict(*pickle, "'f.bin'");
    ASSERT_EQ(d.tensors.size(), 1u);
    const TorchTensor& t = d.tensors[0];
    EXPECT_EQ(t.name, "w");
    EXPECT_EQ(t.dtype, "BF16");
    EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(t.stride, (std::vector<int64_t>{1, 3}));
    EXPECT_EQ(t.storage_offset, 2);
    EXPECT_EQ(t.storage_key, "0");
    ASSERT_EQ(d.storages.count("0"), 1u);
    EXPECT_EQ(d.storages.at("0").numel, 12u);
    EXPECT_EQ(d.storages.at("0").dtype, "BF16");
  }
}

TEST(TorchPickle, ReadsTorch2sRebuildFromTypeOfAParameterAndNoOtherType) {
  const TorchStateDict d = read_torch_state_dict(kFromTypeParameter, "'f.bin'");
  ASSERT_EQ(d.tensors.size(), 1u);
  EXPECT_EQ(d.tensors[0].name, "w");
  EXPECT_EQ(d.tensors[0].dtype, "F32");
  EXPECT_EQ(d.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(d.tensors[0].stride, (std::vector<int64_t>{3, 1}));
  EXPECT_NE(refusal(kFromTypeOrderedDict).find("rebuilds something other than a tensor"),
            std::string::npos)
      << refusal(kFromTypeOrderedDict);
}

TEST(TorchPickle, EveryTruncationIsAnErrorNamingTheFile) {
  for (const std::string* pickle : {&kProtocol2, &kProtocol4})
    for (size_t n = 0; n < pickle->size(); ++n)
      EXPECT_NE(refusal(pickle->substr(0, n)).find("'f.bin'"), std::string::npos) << n;
}

TEST(TorchPickle, HostilePicklesAreRefusedNamingWhy) {
  using namespace std::string_literals;
  const std::string head = "\x80\x02"s;
  const std::pair<std::string, std::string> cases[] = {
      {head + "cposix\nsystem\n(X\x02\x00\x00\x00"
              "lst\x85R."s,
       "names 'posix.system'"},
      {head + "c__builtin__\neval\n."s, "names '__builtin__.eval'"},
      {head + "h\x05."s, "memo 5, never PUT"},
      {head + "X\xff\xff\xff\x7f"s, "ends inside an opcode's argument"},
      {head + "\x8a\x09"s + std::string(9, '\1') + ".", "wider than 64 bits"},
      {head + "]q\x00"
              "h\x00"
              "a."s,
       "holds itself"},
      {head + "R."s, "empty stack"},
      {head + "K\x01."s, "holds no dict"},
      {head + "N"s + std::string(40, '\x85') + ".", "nest deeper"},
      {head + "}K\x01K\x02s."s, "key is not a string"},
      {head + "}X\x01\x00\x00\x00"
              "aK\x02s."s,
       "'a' is not a tensor"},
      {head + "\xff."s, "opcode 0xff"},
      {"\x80\x06."s, "protocol 6"},
      {head + "t."s, "MARK that is not there"},
      {head + "ctorch\nComplexFloatStorage\n."s, "stored as 'torch.ComplexFloatStorage'"},
      {head + "I1\n."s, "opcode 0x49 is none zerotrain reads"},
      // A list placed in another and then changed: the chain of lists it would allow nests
      // deeper than any bound checked when each was placed (and than the stack's recursion).
      {head + "]q\x00"
              "0h\x00"
              "]q\x01"
              "a0h\x01"
              "]a."s,
       "changed after it was placed"},
      // The same for a dict: placed in a list, then given an item.
      {head + "}q\x00"
              "0]h\x00"
              "a0h\x00"
              "K\x01K\x02s."s,
       "changed after it was placed"},
      {head + std::string(3'000'000, '(') + ".", "more objects than a state dict's"},
      {head + std::string(3'000'000, 'N') + ".", "more objects than a state dict's"},
      {head + "N"s + std::string(3'000'000, '\x94') + ".", "memoizes more objects"},
  };
  for (const auto& [pickle, says] : cases) {
    const std::string error = refusal(pickle);
    EXPECT_NE(error.find(says), std::string::npos) << error;
    EXPECT_NE(error.find("'f.bin'"), std::string::npos) << error;
  }
}

TEST(TorchPickle, ViewsPastTheirStorageAreRefused) {
  // kProtocol2 with the storage's 12 elements made 7: the view reaches element 7.
  std::string small = kProtocol2;
  const size_t at =
      small.find(std::string("K\x0c"
                             "t",
                             3));
  ASSERT_NE(at, std::string::npos);
  small[at + 1] = 7;
  EXPECT_NE(refusal(small).find("reaches element 7 of storage '0', which holds 7"),
            std::string::npos)
      << refusal(small);
}

}  // namespace
}  // namespace zt
