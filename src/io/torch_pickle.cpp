#include "io/torch_pickle.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include "util/error.h"

namespace zt {

namespace {

// torch's typed storage classes, as torch.save names them, and the dtype each holds.
const std::map<std::string, std::string>& storage_dtypes() {
  static const std::map<std::string, std::string> dtypes = {
      {"torch.FloatStorage", "F32"}, {"torch.DoubleStorage", "F64"},
      {"torch.HalfStorage", "F16"},  {"torch.BFloat16Storage", "BF16"},
      {"torch.LongStorage", "I64"},  {"torch.IntStorage", "I32"},
      {"torch.ShortStorage", "I16"}, {"torch.CharStorage", "I8"},
      {"torch.ByteStorage", "U8"},   {"torch.BoolStorage", "BOOL"}};
  return dtypes;
}

constexpr const char* kOrderedDict = "collections.OrderedDict";
constexpr const char* kRebuildTensor = "torch._utils._rebuild_tensor_v2";
constexpr const char* kRebuildParameter = "torch._utils._rebuild_parameter";
constexpr const char* kRebuildParameterWithState = "torch._utils._rebuild_parameter_with_state";
// torch 2's way for a tensor with Python attributes: _rebuild_from_type_v2(func, type, args,
// state), the type torch.Tensor or Parameter; the attributes are read past.
constexpr const char* kRebuildFromType = "torch._tensor._rebuild_from_type_v2";
constexpr const char* kTensorType = "torch.Tensor";
constexpr const char* kParameterType = "torch.nn.parameter.Parameter";
// A state dict nests 4 deep. A container is complete before it is placed in another (Python's
// pickler writes them so; one changed later is refused), so this bounds every chain, and the
// destructors' recursion with it.
constexpr int kMaxNesting = 32;
constexpr size_t kMaxDims = 16;  // a weight has at most 5
// Objects pushed and memo entries: a state dict of N tensors pushes about 15 N (a 7B model's
// shard, 300 tensors, 5,000); bounds the memory a hostile pickle of many small opcodes takes.
constexpr size_t kMaxPushes = size_t{1} << 21, kMaxMemo = size_t{1} << 21;

struct Value;
using ValuePtr = std::shared_ptr<Value>;

// One object of the pickle machine. Containers hold their items by shared pointer, as the memo
// may hand the same object out again.
struct Value {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor
  };
  Kind kind = Kind::kNone;
  int64_t integer = 0;
  double real = 0;
  std::string text;  // a string; a global's "module.name"; a storage's key
  std::vector<ValuePtr> items;
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;
  TorchTensor tensor;
  int nesting = 0;
  bool placed = false;  // inside a container, no longer to be changed
};

ValuePtr make(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

class PickleMachine {
 public:
  PickleMachine(const std::string& bytes, const std::string& what) : in_(bytes), what_(what) {}
  // Runs to STOP; returns the object left, the storages met on the way.
  ValuePtr run(std::map<std::string, TorchStorage>& storages);

 private:
  [[noreturn]] void refuse(const std::string& why) const {
    fail(what_ + ": " + why + " (data.pkl byte " + std::to_string(op_at_) + ")");
  }
  uint64_t little_endian(size_t n);
  std::string take(size_t n);
  std::string line();
  ValuePtr pop();
  ValuePtr& top();
  std::vector<ValuePtr> pop_to_mark();
  void count_object() {
    if (++pushes_ > kMaxPushes) refuse("the pickle makes more objects than a state dict's");
  }
  void push(ValuePtr v) {
    count_object();
    stack_.push_back(std::move(v));
  }
  void push_container(Value::Kind kind, std::vector<ValuePtr> items);
  void add_to(const ValuePtr& container, std::vector<ValuePtr> items);
  void memoize(uint64_t key);
  ValuePtr recall(uint64_t key);
  ValuePtr global(const std::string& full_name);
  ValuePtr persistent_storage(const ValuePtr& id, std::map<std::string, TorchStorage>& storages);
  ValuePtr reduce(const ValuePtr& callable, const ValuePtr& args);
  ValuePtr rebuild_tensor(const std::vector<ValuePtr>& args);
  std::vector<int64_t> int_tuple(const ValuePtr& v, const char* what);
  bool push_scalar(uint8_t op);
  bool build_container(uint8_t op);
  bool step(uint8_t op, std::map<std::string, TorchStorage>& storages);

  const std::string& in_;
  std::string what_;
  size_t at_ = 0, op_at_ = 0, pushes_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, ValuePtr> memo_;
};

uint64_t PickleMachine::little_endian(size_t n) {
  const std::string b = take(n);
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(b[i])} << (8 * i);
  return v;
}

std::string PickleMachine::take(size_t n) {
  if (n > in_.size() - at_) refuse("the pickle ends inside an opcode's argument (truncated?)");
  std::string out = in_.substr(at_, n);
  at_ += n;
  return out;
}

std::string PickleMachine::line() {
  const size_t end = in_.find('\n', at_);
  if (end == std::string::npos) refuse("a GLOBAL name runs to the end of the pickle");
  std::string out = in_.substr(at_, end - at_);
  at_ = end + 1;
  return out;
}

ValuePtr PickleMachine::pop() {
  const size_t floor = marks_.empty() ? 0 : marks_.back();
  if (stack_.size() <= floor) refuse("an opcode takes from an empty stack");
  ValuePtr v = std::move(stack_.back());
  stack_.pop_back();
  return v;
}

ValuePtr& PickleMachine::top() {
  const size_t floor = marks_.empty() ? 0 : marks_.back();
  if (stack_.size() <= floor) refuse("an opcode takes from an empty stack");
  return stack_.back();
}

std::vector<ValuePtr> PickleMachine::pop_to_mark() {
  if (marks_.empty()) refuse("an opcode needs a MARK that is not there");
  const size_t mark = marks_.back();
  marks_.pop_back();
  std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
  stack_.resize(mark);
  return items;
}

void PickleMachine::push_container(Value::Kind kind, std::vector<ValuePtr> items) {
  ValuePtr v = make(kind);
  if (kind == Value::Kind::kDict) {
    add_to(v, std::move(items));
  } else {
    for (const ValuePtr& item : items) {
      v->nesting = std::max(v->nesting, item->nesting + 1);
      item->placed = true;
    }
    if (v->nesting > kMaxNesting) refuse("objects nest deeper than a state dict's");
    v->items = std::move(items);
  }
  push(std::move(v));
}

// SETITEM(S) on a dict, APPEND(S) on a list.
void PickleMachine::add_to(const ValuePtr& container, std::vector<ValuePtr> items) {
  if (container->placed && !items.empty())
    refuse("a container is changed after it was placed in another");
  for (const ValuePtr& item : items) {
    if (item == container) refuse("a container holds itself");
    container->nesting = std::max(container->nesting, item->nesting + 1);
    item->placed = true;
  }
  if (container->nesting > kMaxNesting) refuse("objects nest deeper than a state dict's");
  if (container->kind == Value::Kind::kList) {
    for (ValuePtr& item : items) container->items.push_back(std::move(item));
  } else if (container->kind == Value::Kind::kDict) {
    if (items.size() % 2 != 0) refuse("SETITEMS has a key without its value");
    for (size_t i = 0; i < items.size(); i += 2)
      container->entries.emplace_back(std::move(items[i]), std::move(items[i + 1]));
  } else if (!items.empty()) {
    refuse("items are added to an object that is neither a list nor a dict");
  }
}

void PickleMachine::memoize(uint64_t key) {
  if (memo_.size() >= kMaxMemo && !memo_.count(key))
    refuse("the pickle memoizes more objects than a state dict's");
  memo_[key] = top();
}

ValuePtr PickleMachine::recall(uint64_t key) {
  const auto it = memo_.find(key);
  if (it == memo_.end()) refuse("a GET names memo " + std::to_string(key) + ", never PUT");
  return it->second;
}

ValuePtr PickleMachine::global(const std::string& full_name) {
  const std::string& n = full_name;
  const bool known = n == kOrderedDict || n == kRebuildTensor || n == kRebuildParameter ||
                     n == kRebuildParameterWithState || n == kRebuildFromType || n == kTensorType ||
                     n == kParameterType || storage_dtypes().count(n) > 0;
  // Named in messages up to 200 bytes: a hostile name may be megabytes long.
  const std::string name = full_name.substr(0, 200);
  if (!known && name.starts_with("torch.") && name.ends_with("Storage"))
    refuse("a tensor is stored as '" + name +
           "', a type zerotrain does not read (float, integer and bool storages; weights in "
           "BF16, F16, F32 or F64)");
  if (!known)
    refuse("the pickle names '" + name +
           "', which is none of the few calls a state dict of tensors makes; zerotrain runs no "
           "pickled code: save the weights as safetensors");
  ValuePtr v = make(Value::Kind::kGlobal);
  v->text = full_name;
  return v;
}

// BINPERSID: torch.save's ("storage", storage class, key, location, numel).
ValuePtr PickleMachine::persistent_storage(const ValuePtr& id,
                                           std::map<std::string, TorchStorage>& storages) {
  const std::vector<ValuePtr>& f = id->items;
  const bool well_formed =
      id->kind == Value::Kind::kTuple && f.size() == 5 && f[0]->kind == Value::Kind::kString &&
      f[0]->text == "storage" && f[1]->kind == Value::Kind::kGlobal &&
      storage_dtypes().count(f[1]->text) && f[2]->kind == Value::Kind::kString &&
      f[4]->kind == Value::Kind::kInt && f[4]->integer >= 0;
  if (!well_formed)
    refuse("a persistent id is not torch.save's (\"storage\", class, key, location, numel)");
  TorchStorage s{f[2]->text, storage_dtypes().at(f[1]->text), static_cast<uint64_t>(f[4]->integer)};
  const auto [it, added] = storages.emplace(s.key, s);
  if (!added && (it->second.dtype != s.dtype || it->second.numel != s.numel))
    refuse("storage '" + s.key + "' is named twice with different types or sizes");
  ValuePtr v = make(Value::Kind::kStorage);
  v->text = s.key;
  return v;
}

std::vector<int64_t> PickleMachine::int_tuple(const ValuePtr& v, const char* what) {
  if (v->kind != Value::Kind::kTuple) refuse(std::string("a tensor's ") + what + " is no tuple");
  if (v->items.size() > kMaxDims)
    refuse("a tensor has " + std::to_string(v->items.size()) + " dimensions, more than " +
           std::to_string(kMaxDims));
  std::vector<int64_t> out;
  for (const ValuePtr& item : v->items) {
    if (item->kind != Value::Kind::kInt || item->integer < 0)
      refuse(std::string("a tensor's ") + what + " holds something not a size");
    out.push_back(item->integer);
  }
  return out;
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[,
// metadata]): the view is checked against its storage once the dict is complete.
ValuePtr PickleMachine::rebuild_tensor(const std::vector<ValuePtr>& args) {
  if ((args.size() != 6 && args.size() != 7) || args[0]->kind != Value::Kind::kStorage ||
      args[1]->kind != Value::Kind::kInt || args[1]->integer < 0)
    refuse(std::string(kRebuildTensor) + " has arguments torch.save does not write");
  if (args[5]->kind == Value::Kind::kDict && !args[5]->entries.empty())
    refuse("a tensor carries backward hooks");
  ValuePtr v = make(Value::Kind::kTensor);
  v->tensor.storage_key = args[0]->text;
  v->tensor.storage_offset = args[1]->integer;
  v->tensor.shape = int_tuple(args[2], "size");
  v->tensor.stride = int_tuple(args[3], "stride");
  if (v->tensor.shape.size() != v->tensor.stride.size())
    refuse("a tensor's size and stride differ in length");
  return v;
}

ValuePtr PickleMachine::reduce(const ValuePtr& callable, const ValuePtr& args) {
  if (callable->kind != Value::Kind::kGlobal || args->kind != Value::Kind::kTuple)
    refuse("REDUCE calls something that is not a known function");
  const std::string& name = callable->text;
  const std::vector<ValuePtr>& a = args->items;
  if (name == kOrderedDict) {
    if (!a.empty()) refuse("OrderedDict is built with arguments");
    return make(Value::Kind::kDict);
  }
  if (name == kRebuildTensor) return rebuild_tensor(a);
  if (name == kRebuildFromType) {  // (func, type, args, state)
    if (a.size() != 4 || a[0]->kind != Value::Kind::kGlobal || a[0]->text != kRebuildTensor ||
        a[1]->kind != Value::Kind::kGlobal ||
        (a[1]->text != kTensorType && a[1]->text != kParameterType) ||
        a[2]->kind != Value::Kind::kTuple)
      refuse(name + " rebuilds something other than a tensor or a Parameter");
    return rebuild_tensor(a[2]->items);
  }
  if (name == kRebuildParameter || name == kRebuildParameterWithState) {
    if (a.size() < 3 || a[0]->kind != Value::Kind::kTensor)
      refuse(name + " has arguments torch.save does not write");
    return a[0];
  }
  refuse("'" + name + "' is not called as a state dict calls it");
}

// The opcodes that push one scalar (None, a bool, an int, a float, a string); false for others.
bool PickleMachine::push_scalar(uint8_t op) {
  using K = Value::Kind;
  switch (op) {
    case 'N':
      push(make(K::kNone));
      return true;
    case 0x88:
    case 0x89: {  // NEWTRUE, NEWFALSE
      ValuePtr v = make(K::kBool);
      v->integer = op == 0x88;
      push(std::move(v));
      return true;
    }
    case 'X':
    case 0x8c:
    case 0x8d:
    case 'T':
    case 'U': {  // the string opcodes
      const size_t width = op == 'X' || op == 'T' ? 4 : op == 0x8d ? 8 : 1;
      const uint64_t n = little_endian(width);
      if (op == 'T' && n > 0x7fffffffu) refuse("a string has a negative length");
      ValuePtr v = make(K::kString);
      v->text = take(static_cast<size_t>(n));  // refused past the pickle's end
      push(std::move(v));
      return true;
    }
    case 'J':
    case 'K':
    case 'M':
    case 0x8a: {  // BININT, BININT1, BININT2, LONG1
      const size_t width = op == 'J' ? 4 : op == 'K' ? 1 : op == 'M' ? 2 : little_endian(1);
      if (width > 8) refuse("an integer wider than 64 bits");
      uint64_t bits = little_endian(width);
      const bool is_signed = op == 'J' || op == 0x8a;
      if (is_signed && width > 0 && width < 8 && (bits >> (8 * width - 1)) != 0)
        bits |= ~uint64_t{0} << (8 * width);  // sign-extend
      ValuePtr v = make(K::kInt);
      v->integer = static_cast<int64_t>(bits);
      push(std::move(v));
      return true;
    }
    case 'G': {  // BINFLOAT, big-endian
      const std::string b = take(8);
      uint64_t bits = 0;
      for (char c : b) bits = (bits << 8) | static_cast<uint8_t>(c);
      ValuePtr v = make(K::kFloat);
      std::memcpy(&v->real, &bits, 8);
      push(std::move(v));
      return true;
    }
    default:
      return false;
  }
}

// The opcodes that build or fill a tuple, list or dict; false for others.
bool PickleMachine::build_container(uint8_t op) {
  using K = Value::Kind;
  switch (op) {
    case '}':
      push(make(K::kDict));
      return true;
    case ']':
      push(make(K::kList));
      return true;
    case ')':
      push(make(K::kTuple));
      return true;
    case 't':
      push_container(K::kTuple, pop_to_mark());
      return true;
    case 'l':
      push_container(K::kList, pop_to_mark());
      return true;
    case 'd':
      push_container(K::kDict, pop_to_mark());
      return true;
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
      std::vector<ValuePtr> items(static_cast<size_t>(op - 0x84));
      for (size_t i = items.size(); i-- > 0;) items[i] = pop();
      push_container(K::kTuple, std::move(items));
      return true;
    }
    case 'b': {  // BUILD: a state dict's attributes (Module.state_dict()'s _metadata), not items
      const ValuePtr state = pop();
      if (top()->kind != K::kDict || (state->kind != K::kDict && state->kind != K::kNone))
        refuse("BUILD sets the state of an object that is not a dict");
      return true;
    }
    case 's':
    case 'a': {  // SETITEM, APPEND
      std::vector<ValuePtr> items(op == 's' ? 2 : 1);
      for (size_t i = items.size(); i-- > 0;) items[i] = pop();
      add_to(top(), std::move(items));
      return true;
    }
    case 'u':
    case 'e': {  // SETITEMS, APPENDS
      std::vector<ValuePtr> items = pop_to_mark();
      add_to(top(), std::move(items));
      return true;
    }
    default:
      return false;
  }
}

// One opcode; false at STOP. Protocols 2 to 5's binary opcodes that a dict of tensors may use.
bool PickleMachine::step(uint8_t op, std::map<std::string, TorchStorage>& storages) {
  using K = Value::Kind;
  switch (op) {
    case 0x80: {  // PROTO
      const uint64_t protocol = little_endian(1);
      if (protocol > 5) refuse("pickle protocol " + std::to_string(protocol) + " is unknown");
      return true;
    }
    case 0x95:
      little_endian(8);
      return true;  // FRAME
    case '.':
      return false;  // STOP
    case '(':
      count_object();
      marks_.push_back(stack_.size());
      return true;
    case '0':
      pop();
      return true;  // POP
    case 'q':
      memoize(little_endian(1));
      return true;  // BINPUT
    case 'r':
      memoize(little_endian(4));
      return true;  // LONG_BINPUT
    case 0x94:
      memoize(memo_.size());
      return true;  // MEMOIZE
    case 'h':
      push(recall(little_endian(1)));
      return true;
    case 'j':
      push(recall(little_endian(4)));
      return true;
    case 'c': {  // GLOBAL
      const std::string module = line();
      push(global(module + "." + line()));
      return true;
    }
    case 0x93: {  // STACK_GLOBAL
      const ValuePtr name = pop(), module = pop();
      if (name->kind != K::kString || module->kind != K::kString)
        refuse("STACK_GLOBAL names are not strings");
      push(global(module->text + "." + name->text));
      return true;
    }
    case 'Q': {  // BINPERSID
      const ValuePtr id = pop();
      push(persistent_storage(id, storages));
      return true;
    }
    case 'R': {  // REDUCE
      const ValuePtr args = pop(), callable = pop();
      push(reduce(callable, args));
      return true;
    }
    default:
      break;
  }
  if (push_scalar(op) || build_container(op)) return true;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", op);
  refuse(std::string("pickle opcode ") + hex +
         " is none zerotrain reads: it reads the binary opcodes of pickle protocols 2 to 5 that "
         "a state dict of tensors needs (torch.save writes protocol 2 unless told otherwise)");
}

ValuePtr PickleMachine::run(std::map<std::string, TorchStorage>& storages) {
  while (true) {
    if (at_ >= in_.size()) refuse("the pickle ends before its STOP (truncated?)");
    op_at_ = at_;
    if (!step(static_cast<uint8_t>(in_[at_++]), storages)) break;
  }
  if (stack_.size() != 1 || !marks_.empty()) refuse("the pickle leaves more than one object");
  return stack_.back();
}

// The view's last element lies inside its storage (sizes and strides are non-negative).
void check_view(const TorchTensor& t, const TorchStorage& s, const std::string& what) {
  uint64_t last = static_cast<uint64_t>(t.storage_offset), numel = 1;
  bool overflow = false;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    const auto size = static_cast<uint64_t>(t.shape[d]);
    uint64_t reach = 0;
    overflow |= __builtin_mul_overflow(numel, size, &numel);
    if (size > 0) {
      overflow |= __builtin_mul_overflow(size - 1, static_cast<uint64_t>(t.stride[d]), &reach);
      overflow |= __builtin_add_overflow(last, reach, &last);
    }
  }
  ZT_CHECK(!overflow && numel < (uint64_t{1} << 50),
           what + ": tensor '" + t.name + "' is too large");
  ZT_CHECK(numel == 0 || last < s.numel, what + ": tensor '" + t.name + "' reaches element " +
                                             std::to_string(last) + " of storage '" + s.key +
                                             "', which holds " + std::to_string(s.numel));
}

}  // namespace

TorchStateDict read_torch_state_dict(const std::string& pickle, const std::string& what) {
  TorchStateDict out;
  PickleMachine machine(pickle, what);
  const ValuePtr root = machine.run(out.storages);
  ZT_CHECK(root->kind == Value::Kind::kDict,
           what + ": the pickle holds no dict of tensors (a state dict is what it reads)");
  std::set<std::string> names;
  for (const auto& [key, value] : root->entries) {
    ZT_CHECK(key->kind == Value::Kind::kString, what + ": a state dict key is not a string");
    ZT_CHECK(value->kind == Value::Kind::kTensor,
             what + ": '" + key->text + "' is not a tensor" +
                 (value->kind == Value::Kind::kDict
                      ? " but a dict (a training checkpoint? save its model's state_dict())"
                      : "; a state dict holds tensors alone"));
    ZT_CHECK(names.insert(key->text).second, what + ": tensor '" + key->text + "' appears twice");
    TorchTensor t = value->tensor;
    t.name = key->text;
    const TorchStorage& s = out.storages.at(t.storage_key);
    t.dtype = s.dtype;
    check_view(t, s, what);
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace zt
