// The extension's lint: ESLint's and typescript-eslint's recommended rules.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['out/', 'node_modules/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      // Every promise is either awaited or deliberately left to VS Code (withProgress).
      eqeqeq: 'error',
    },
  },
);
