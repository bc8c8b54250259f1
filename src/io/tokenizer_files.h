// The Hugging Face tokenizer files that travel with the data and the model: `prepare-data
// --tokenizer` stores them in the token dataset, `train` writes them into OUT/final/, `import`
// and `export` copy them between model directories and Hugging Face directories, so that
// AutoTokenizer.from_pretrained works on an export. generation_config.json carries the bos/eos
// ids.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zt {

// The files, in the order they are listed in messages: tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, generation_config.json, chat_template.jinja (where transformers 4.5x
// saves the chat template), added_tokens.json and tokenizer.model (SentencePiece's model, which
// slow tokenizers and converters read).
const std::vector<std::string>& tokenizer_file_names();

// A tokenizer's named chat templates (tokenizer_config.json's list form, [{"name", "template"},
// ...], as Hermes 3 and Command R ship them): transformers 4.5x and later save the "default" one
// as chat_template.jinja and each other one as additional_chat_templates/NAME.jinja, which are
// kept under that relative path.
extern const char* const kNamedChatTemplateDir;  // "additional_chat_templates"
// "additional_chat_templates/NAME.jinja"; NAME must be a file name's stem (no '/', not empty).
std::string named_chat_template_file(const std::string& name);
// NAME when `path` is such a file, else "".
std::string named_chat_template_name(const std::string& path);

struct TokenizerFiles {
  // file name -> contents: one of the names above, or a named chat template's relative path
  std::map<std::string, std::string> files;
  int64_t bos_token_id = -1;  // -1: the tokenizer has none
  int64_t eos_token_id = -1;
  bool empty() const { return files.empty(); }
};

// The files to write beside a model: every file, and generation_config.json with the bos/eos ids
// when the files do not include one.
std::map<std::string, std::string> tokenizer_files_to_write(const TokenizerFiles& tokenizer);

// {"bos_token_id", "eos_token_id"}: those that generation_config.json among `files` (as
// tokenizer_files_to_write returns them) holds, an id or a list of ids each; {} without one. An
// export's config.json carries them, as a Hub checkpoint's does: transformers reads them there
// where no generation config is loaded (pipelines; its config class's defaults otherwise, which
// are other tokens for most vocabularies). A generation_config.json that is not a JSON object, or
// a value that is no token id nor a list of them (null is none), is refused naming `where` and
// the key.
nlohmann::json generation_token_ids(const std::map<std::string, std::string>& files,
                                    const std::string& where);

// Writes tokenizer_files_to_write() into `dir` (which must exist). Each file is written whole,
// then renamed into place.
void write_tokenizer_files(const TokenizerFiles& tokenizer, const std::string& dir);

// Writes one of the files, `name` (a key of TokenizerFiles::files), under `dir`, making the
// named templates' directory where the name needs it.
void write_tokenizer_file(const std::string& dir, const std::string& name, const std::string& text);

// The tokenizer files at `path`: a directory holding them, or a tokenizer.json file (stored as
// tokenizer.json whatever its name) with the others read from its directory. The bos/eos ids are
// left at -1 for the caller.
TokenizerFiles read_tokenizer_files(const std::string& path);

// The chat templates, name -> template, as transformers 5 loads them: chat_template.jinja (as
// "default") and the additional_chat_templates/ files where there are any, which replace what
// tokenizer_config.json holds; else `config`'s "chat_template" (the parsed tokenizer_config.json,
// read from `config_file`), a string (as "default") or the list form. Empty where there is none.
// An entry of the list that is not {"name": string, "template": string}, or a name given twice,
// is an error naming the file.
std::map<std::string, std::string> chat_templates(const TokenizerFiles& tokenizer,
                                                  const nlohmann::json& config,
                                                  const std::string& config_file);

// The text of a chat template file (`prepare-data --chat-template-file`, TRL's
// chat_template_path): a Jinja template as chat_template.jinja holds it. A missing or unreadable
// path, a directory, an empty file, text that is not UTF-8 and a JSON object (a tokenizer config,
// not its template) are errors naming the file.
std::string read_chat_template_file(const std::string& path);

// Makes `text` the tokenizer's one chat template, so that every transformers version loads it
// and no other: chat_template.jinja (what 4.5x and 5 read first) holds it, tokenizer_config.json's
// "chat_template" too where there is a config (what 4.4x reads; the config is otherwise kept, its
// keys in order), and the named templates (additional_chat_templates/) are dropped. `tokenizer`
// names the files' origin in the error for a config that is not a JSON object.
void replace_chat_template(TokenizerFiles& files, const std::string& text,
                           const std::string& tokenizer);

// Whether two tokenizers encode text alike: the same files and bos/eos ids, apart from their chat
// templates (chat_template.jinja, additional_chat_templates/, the config's "chat_template"), which
// render conversations but leave the encoding as it is: a held-out set of plain text needs no
// --chat-template-file to be scored beside chat data made with one.
bool same_tokenizer_apart_from_chat_templates(const TokenizerFiles& a, const TokenizerFiles& b);

}  // namespace zt
